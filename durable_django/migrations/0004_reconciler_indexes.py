from django.db import migrations, models


class Migration(migrations.Migration):
    """Indexes the reconciler walks in bounded chunks: waiting runs by id, and children by (parent, id).

    On a large table, build them first with CREATE INDEX CONCURRENTLY (docs/guide.md, "The schema").
    """

    dependencies = [
        ("durable_django", "0003_attempt_started_at"),
    ]

    operations = [
        migrations.RemoveIndex(
            model_name="run",
            name="durable_run_children",
        ),
        migrations.AddIndex(
            model_name="run",
            index=models.Index(
                condition=models.Q(("status", "waiting")), fields=["run_id"], name="durable_run_waiting"
            ),
        ),
        migrations.AddIndex(
            model_name="run",
            index=models.Index(
                condition=models.Q(("parent_run_id__isnull", False)),
                fields=["parent_run_id", "run_id"],
                name="durable_run_children",
            ),
        ),
    ]
