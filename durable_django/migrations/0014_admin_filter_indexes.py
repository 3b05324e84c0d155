from django.db import migrations, models


class Migration(migrations.Migration):
    """The runs listing filtered by function reads its page from an index in listing order.

    No field changes. On a large table, build the index by hand with CREATE INDEX CONCURRENTLY first
    (docs/guide.md, "Large tables").
    """

    dependencies = [
        ("durable_django", "0013_events_streams"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="run",
            index=models.Index(fields=["name", "created_at", "run_id"], name="durable_run_name_listing"),
        ),
    ]
