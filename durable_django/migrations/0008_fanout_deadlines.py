from django.db import migrations, models


class Migration(migrations.Migration):
    """Fan-in waits counted per landing (awaited_token, awaiting_children) and run deadlines."""

    dependencies = [
        ("durable_django", "0007_observability"),
    ]

    operations = [
        migrations.AddField(
            model_name="run",
            name="awaited_token",
            field=models.IntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="run",
            name="awaiting_children",
            field=models.IntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="run",
            name="deadline",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddIndex(
            model_name="run",
            index=models.Index(
                condition=models.Q(("deadline__isnull", False), ("status__in", ["pending", "running", "waiting"])),
                fields=["deadline"],
                name="durable_run_deadlines",
            ),
        ),
    ]
