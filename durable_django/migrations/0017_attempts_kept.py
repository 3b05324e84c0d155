from django.db import migrations, models

from durable_django.store.schema import schema_sql

# Every attempt's end written by the statement that ends it: a trigger on durable_run
# (store/schema/durable_attempt_ended.v1.sql says how).
ATTEMPT_ENDED = schema_sql("durable_attempt_ended", 1)

DROP_ATTEMPT_ENDED = """
DROP TRIGGER IF EXISTS durable_attempt_ended ON durable_run;
DROP FUNCTION IF EXISTS durable_attempt_ended();
"""


class Migration(migrations.Migration):
    """Every attempt kept, each step timed, and runs parked for an operator."""

    dependencies = [
        ("durable_django", "0016_hold_woken_runs"),
    ]

    operations = [
        migrations.CreateModel(
            name="Attempt",
            fields=[
                (
                    "pk",
                    models.CompositePrimaryKey(
                        "run_id", "number", blank=True, editable=False, primary_key=True, serialize=False
                    ),
                ),
                ("run_id", models.TextField()),
                ("number", models.IntegerField()),
                ("worker_id", models.TextField(blank=True, null=True)),
                ("started_at", models.DateTimeField(blank=True, null=True)),
                ("ended_at", models.DateTimeField()),
                ("outcome", models.TextField()),
                ("error", models.TextField(blank=True, null=True)),
                ("error_type", models.TextField(blank=True, null=True)),
                ("waited_for", models.TextField(blank=True, null=True)),
            ],
            options={"verbose_name": "attempt", "db_table": "durable_attempt"},
        ),
        migrations.AddField(model_name="step", name="started_at", field=models.DateTimeField(blank=True, null=True)),
        migrations.AddField(model_name="step", name="duration", field=models.DurationField(blank=True, null=True)),
        migrations.AddField(model_name="run", name="parked_at", field=models.DateTimeField(blank=True, null=True)),
        migrations.AddIndex(
            model_name="run",
            index=models.Index(
                fields=["parked_at"],
                condition=models.Q(status="waiting", parked_at__isnull=False),
                name="durable_run_parked",
            ),
        ),
        migrations.RunSQL(ATTEMPT_ENDED, reverse_sql=DROP_ATTEMPT_ENDED),
    ]
