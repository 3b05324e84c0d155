import django.db.models.functions.datetime
from django.db import migrations, models

from durable_django.store.schema import schema_sql


class Migration(migrations.Migration):
    """Observability: a run's progress and the trace context of its enqueue, the workers table, the index the
    health check and the workers page probe, and the statistics behind the runs gauge.

    ``durable_worker`` is created in SQL: Django would add a ``text_pattern_ops`` index beside its text
    primary key after the migration's operations (see 0002), which nobody's LIKE query needs. The extended
    statistics on (status, queue) give PostgreSQL's estimate of the runs in each status and queue, which the
    worker's ``durable_runs`` gauge reads instead of counting a large table. On a large table, build the index
    first with CREATE INDEX CONCURRENTLY (docs/guide.md, "The schema").
    """

    dependencies = [
        ("durable_django", "0006_flow_admission"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="Worker",
                    fields=[
                        ("worker_id", models.TextField(primary_key=True, serialize=False)),
                        ("host", models.TextField()),
                        ("pid", models.IntegerField()),
                        ("queues", models.JSONField(blank=True, null=True)),
                        ("functions", models.JSONField(default=dict)),
                        ("tenant_id", models.UUIDField(blank=True, null=True)),
                        ("concurrency", models.IntegerField()),
                        ("started_at", models.DateTimeField(db_default=django.db.models.functions.datetime.Now())),
                        ("last_seen_at", models.DateTimeField(db_default=django.db.models.functions.datetime.Now())),
                        ("stopped_at", models.DateTimeField(blank=True, null=True)),
                    ],
                    options={
                        "verbose_name": "worker",
                        "db_table": "durable_worker",
                    },
                ),
            ],
            database_operations=[
                migrations.RunSQL(
                    sql=schema_sql("durable_worker", 1),
                    reverse_sql="DROP TABLE durable_worker",
                ),
            ],
        ),
        migrations.AddField(
            model_name="run",
            name="progress",
            field=models.JSONField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="run",
            name="trace_context",
            field=models.JSONField(blank=True, null=True),
        ),
        migrations.AddIndex(
            model_name="run",
            index=models.Index(
                condition=models.Q(("status", "pending")),
                fields=["name", "version", "available_at", "updated_at"],
                name="durable_run_pending_versions",
            ),
        ),
        migrations.RunSQL(
            sql="CREATE STATISTICS durable_run_status_queue (mcv) ON status, queue FROM durable_run",
            reverse_sql="DROP STATISTICS durable_run_status_queue",
        ),
    ]
