from django.db import migrations, models


class Migration(migrations.Migration):
    """When the current claim's attempt started: NULL while a claimed run waits for a worker's slot.

    Runs already running when this migration applies were claimed by workers
    that started every claim at once, so they count as started.
    """

    dependencies = [
        ("durable_django", "0002_drop_pattern_indexes"),
    ]

    operations = [
        migrations.AddField(
            model_name="run",
            name="attempt_started_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.RunSQL(
            sql="UPDATE durable_run SET attempt_started_at = coalesce(claimed_at, now()) WHERE status = 'running'",
            reverse_sql=migrations.RunSQL.noop,
        ),
    ]
