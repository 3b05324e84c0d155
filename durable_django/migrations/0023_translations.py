import django.db.models.functions.datetime
from django.db import migrations, models


class Migration(migrations.Migration):
    """Verbose names, plural too, that the admin shows translated; the tables do not change (no SQL)."""

    dependencies = [
        ("durable_django", "0022_drop_divergence_like_index"),
    ]

    operations = [
        migrations.AlterModelOptions(
            name="attempt",
            options={"verbose_name": "attempt", "verbose_name_plural": "attempts"},
        ),
        migrations.AlterModelOptions(
            name="event",
            options={"verbose_name": "event", "verbose_name_plural": "events"},
        ),
        migrations.AlterModelOptions(
            name="leaserenewal",
            options={"verbose_name": "lease renewal", "verbose_name_plural": "lease renewals"},
        ),
        migrations.AlterModelOptions(
            name="pause",
            options={"verbose_name": "pause", "verbose_name_plural": "pauses"},
        ),
        migrations.AlterModelOptions(
            name="ratestart",
            options={"verbose_name": "rate-limited start", "verbose_name_plural": "rate-limited starts"},
        ),
        migrations.AlterModelOptions(
            name="replaydivergence",
            options={"verbose_name": "replay divergence", "verbose_name_plural": "replay divergences"},
        ),
        migrations.AlterModelOptions(
            name="run",
            options={
                "permissions": [
                    ("cancel_run", "Can cancel durable runs"),
                    ("retry_run", "Can resume and retry durable runs"),
                    ("signal_run", "Can emit signals to durable runs"),
                    ("pause_run", "Can pause and unpause durable functions and queues"),
                    ("fork_run", "Can fork durable runs"),
                    ("resume_run_on_version", "Can resume durable runs on another version"),
                ],
                "verbose_name": "run",
                "verbose_name_plural": "runs",
            },
        ),
        migrations.AlterModelOptions(
            name="schedule",
            options={
                "permissions": [("fire_schedule", "Can fire durable schedules now")],
                "verbose_name": "schedule",
                "verbose_name_plural": "schedules",
            },
        ),
        migrations.AlterModelOptions(
            name="schedulerun",
            options={"verbose_name": "schedule run", "verbose_name_plural": "schedule runs"},
        ),
        migrations.AlterModelOptions(
            name="signal",
            options={"verbose_name": "signal", "verbose_name_plural": "signals"},
        ),
        migrations.AlterModelOptions(
            name="step",
            options={"verbose_name": "step", "verbose_name_plural": "steps"},
        ),
        migrations.AlterModelOptions(
            name="stream",
            options={"verbose_name": "stream", "verbose_name_plural": "streams"},
        ),
        migrations.AlterModelOptions(
            name="streamitem",
            options={"verbose_name": "stream item", "verbose_name_plural": "stream items"},
        ),
        migrations.AlterModelOptions(
            name="worker",
            options={"verbose_name": "worker", "verbose_name_plural": "workers"},
        ),
        migrations.AlterField(
            model_name="pause",
            name="created_at",
            field=models.DateTimeField(db_default=django.db.models.functions.datetime.Now(), verbose_name="created at"),
        ),
        migrations.AlterField(
            model_name="pause",
            name="function",
            field=models.TextField(blank=True, null=True, verbose_name="function"),
        ),
        migrations.AlterField(
            model_name="pause",
            name="key",
            field=models.TextField(primary_key=True, serialize=False, verbose_name="key"),
        ),
        migrations.AlterField(
            model_name="pause",
            name="queue",
            field=models.TextField(blank=True, null=True, verbose_name="queue"),
        ),
        migrations.AlterField(
            model_name="pause",
            name="reason",
            field=models.TextField(blank=True, db_default="", verbose_name="reason"),
        ),
        migrations.AlterField(
            model_name="run",
            name="created_at",
            field=models.DateTimeField(db_default=django.db.models.functions.datetime.Now(), verbose_name="created at"),
        ),
        migrations.AlterField(
            model_name="run",
            name="run_id",
            field=models.TextField(primary_key=True, serialize=False, verbose_name="run id"),
        ),
        migrations.AlterField(
            model_name="run",
            name="status",
            field=models.TextField(
                choices=[
                    ("pending", "Pending"),
                    ("running", "Running"),
                    ("waiting", "Waiting"),
                    ("succeeded", "Succeeded"),
                    ("failed", "Failed"),
                    ("cancelled", "Cancelled"),
                ],
                verbose_name="status",
            ),
        ),
        migrations.AlterField(
            model_name="run",
            name="worker_id",
            field=models.TextField(blank=True, null=True, verbose_name="worker id"),
        ),
        migrations.AlterField(
            model_name="schedule",
            name="cron",
            field=models.TextField(verbose_name="cron"),
        ),
        migrations.AlterField(
            model_name="schedule",
            name="enabled",
            field=models.BooleanField(db_default=True, verbose_name="enabled"),
        ),
        migrations.AlterField(
            model_name="schedule",
            name="name",
            field=models.TextField(verbose_name="name"),
        ),
        migrations.AlterField(
            model_name="schedule",
            name="overlap",
            field=models.TextField(db_default="allow_all", verbose_name="overlap"),
        ),
        migrations.AlterField(
            model_name="schedule",
            name="source",
            field=models.TextField(db_default="api", verbose_name="source"),
        ),
        migrations.AlterField(
            model_name="worker",
            name="concurrency",
            field=models.IntegerField(verbose_name="concurrency"),
        ),
        migrations.AlterField(
            model_name="worker",
            name="host",
            field=models.TextField(verbose_name="host"),
        ),
        migrations.AlterField(
            model_name="worker",
            name="pid",
            field=models.IntegerField(verbose_name="pid"),
        ),
        migrations.AlterField(
            model_name="worker",
            name="worker_id",
            field=models.TextField(primary_key=True, serialize=False, verbose_name="worker id"),
        ),
    ]
