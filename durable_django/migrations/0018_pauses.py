import django.db.models.functions.datetime
from django.db import migrations, models

from durable_django.store.schema import schema_sql

# Holds the due runs a claim found under a pause (store/claims.py, store/schema/durable_hold_paused.v1.sql).
HOLD_PAUSED = schema_sql("durable_hold_paused", 1)


class Migration(migrations.Migration):
    """Pauses of a function or a queue, and the operator permissions of pausing, forking and resuming on
    another version."""

    dependencies = [
        ("durable_django", "0017_attempts_kept"),
    ]

    operations = [
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
            },
        ),
        migrations.CreateModel(
            name="Pause",
            fields=[
                ("key", models.TextField(primary_key=True, serialize=False)),
                ("function", models.TextField(blank=True, null=True)),
                ("queue", models.TextField(blank=True, null=True)),
                ("reason", models.TextField(blank=True, db_default="")),
                ("created_at", models.DateTimeField(db_default=django.db.models.functions.datetime.Now())),
            ],
            options={
                "verbose_name": "pause",
                "db_table": "durable_pause",
                "constraints": [
                    models.CheckConstraint(
                        condition=models.Q(
                            models.Q(("function__isnull", True), ("queue__isnull", False)),
                            models.Q(("function__isnull", False), ("queue__isnull", True)),
                            _connector="OR",
                        ),
                        name="durable_pause_one_target",
                    )
                ],
            },
        ),
        migrations.RunSQL(HOLD_PAUSED, reverse_sql="DROP FUNCTION durable_hold_paused(text[])"),
    ]
