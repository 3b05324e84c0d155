import django.db.models.functions.datetime
from django.db import migrations, models

from durable_django.store.schema import schema_sql

# Django creates a LIKE (text_pattern_ops) index beside every indexed text column, at the end of the
# migration; no query of ours runs LIKE on a key, and each costs every insert.
DROP_PATTERN_INDEXES = r"""
DO $$
DECLARE index_name text;
BEGIN
    FOR index_name IN
        SELECT indexname FROM pg_indexes
        WHERE schemaname = current_schema() AND tablename LIKE 'durable\_%' AND indexdef LIKE '%pattern_ops%'
    LOOP
        EXECUTE format('DROP INDEX %I', index_name);
    END LOOP;
END $$;
"""


def drop_pattern_indexes(apps, schema_editor):
    """Make now the indexes Django defers to the migration's end, then drop its LIKE ones (0002, 0019, 0022
    dropped them in migrations of their own, after Django had made them)."""
    for statement in schema_editor.deferred_sql:
        schema_editor.execute(statement)
    schema_editor.deferred_sql.clear()
    schema_editor.execute(DROP_PATTERN_INDEXES, params=None)


class Migration(migrations.Migration):
    """The schema of migrations 0001 to 0022 in one step, for a new install.

    An install that has applied some of 0001-0022 goes on with the rest of them, which stay in the tree;
    Django then records this migration as applied, and a migration that depends on
    ``0022_drop_divergence_like_index`` follows this one on a new install. The models come first, in the
    columns' order of the chain (the functions return ``durable_run`` rows); then what 0007, 0009 and 0020
    add in SQL (the index of 0020 without CONCURRENTLY: the table is empty), and the last version of each
    function (store/schema).
    """

    initial = True

    replaces = [
        ("durable_django", "0001_initial"),
        ("durable_django", "0002_drop_pattern_indexes"),
        ("durable_django", "0003_attempt_started_at"),
        ("durable_django", "0004_reconciler_indexes"),
        ("durable_django", "0005_flow_control"),
        ("durable_django", "0006_flow_admission"),
        ("durable_django", "0007_observability"),
        ("durable_django", "0008_fanout_deadlines"),
        ("durable_django", "0009_storage_tuning"),
        ("durable_django", "0010_claim_by_queue_and_tenant"),
        ("durable_django", "0011_rate_start_batches"),
        ("durable_django", "0012_rate_hold_queue"),
        ("durable_django", "0013_events_streams"),
        ("durable_django", "0014_admin_filter_indexes"),
        ("durable_django", "0015_lease_renewals"),
        ("durable_django", "0016_hold_woken_runs"),
        ("durable_django", "0017_attempts_kept"),
        ("durable_django", "0018_pauses"),
        ("durable_django", "0019_forks"),
        ("durable_django", "0020_input_search"),
        ("durable_django", "0021_schedule_policies"),
        ("durable_django", "0022_drop_divergence_like_index"),
    ]

    dependencies = []

    operations = [
        migrations.CreateModel(
            name="Signal",
            fields=[
                (
                    "pk",
                    models.CompositePrimaryKey(
                        "run_id", "signal", "occurrence", blank=True, editable=False, primary_key=True, serialize=False
                    ),
                ),
                ("run_id", models.TextField()),
                ("signal", models.TextField()),
                ("occurrence", models.IntegerField()),
                ("value", models.JSONField()),
                ("tenant_id", models.UUIDField(blank=True, null=True)),
                ("created_at", models.DateTimeField(db_default=django.db.models.functions.datetime.Now())),
            ],
            options={
                "verbose_name": "signal",
                "db_table": "durable_signal",
            },
        ),
        migrations.CreateModel(
            name="Step",
            fields=[
                (
                    "pk",
                    models.CompositePrimaryKey(
                        "run_id", "step_id", blank=True, editable=False, primary_key=True, serialize=False
                    ),
                ),
                ("run_id", models.TextField()),
                ("step_id", models.TextField()),
                ("result", models.JSONField()),
                ("tenant_id", models.UUIDField(blank=True, null=True)),
                ("created_at", models.DateTimeField(db_default=django.db.models.functions.datetime.Now())),
                ("started_at", models.DateTimeField(blank=True, null=True)),
                ("duration", models.DurationField(blank=True, null=True)),
            ],
            options={
                "verbose_name": "step",
                "db_table": "durable_step",
            },
        ),
        migrations.CreateModel(
            name="Run",
            fields=[
                ("run_id", models.TextField(primary_key=True, serialize=False)),
                ("name", models.TextField()),
                ("version", models.IntegerField(db_default=1)),
                (
                    "status",
                    models.TextField(
                        choices=[
                            ("pending", "Pending"),
                            ("running", "Running"),
                            ("waiting", "Waiting"),
                            ("succeeded", "Succeeded"),
                            ("failed", "Failed"),
                            ("cancelled", "Cancelled"),
                        ]
                    ),
                ),
                ("idempotency_key", models.TextField(blank=True, null=True)),
                ("coalesce_key", models.TextField(blank=True, null=True)),
                ("input", models.JSONField(blank=True, null=True)),
                ("output", models.JSONField(blank=True, null=True)),
                ("error", models.TextField(blank=True, null=True)),
                ("error_type", models.TextField(blank=True, null=True)),
                ("tenant_id", models.UUIDField(blank=True, null=True)),
                ("attempts", models.IntegerField(db_default=0)),
                ("failures", models.IntegerField(db_default=0)),
                ("recoveries", models.IntegerField(db_default=0)),
                ("retry_policy", models.JSONField(default=dict)),
                ("queue", models.TextField(db_default="default")),
                ("priority", models.IntegerField(db_default=0)),
                ("parent_run_id", models.TextField(blank=True, null=True)),
                ("has_children", models.BooleanField(db_default=False)),
                ("pivoted_at", models.DateTimeField(blank=True, null=True)),
                ("waiting_for", models.TextField(blank=True, null=True)),
                ("leased_until", models.DateTimeField(blank=True, null=True)),
                ("available_at", models.DateTimeField(blank=True, null=True)),
                ("started_at", models.DateTimeField(blank=True, null=True)),
                ("claimed_at", models.DateTimeField(blank=True, null=True)),
                ("finished_at", models.DateTimeField(blank=True, null=True)),
                ("worker_id", models.TextField(blank=True, null=True)),
                ("created_at", models.DateTimeField(db_default=django.db.models.functions.datetime.Now())),
                ("updated_at", models.DateTimeField(db_default=django.db.models.functions.datetime.Now())),
                ("cancel_requested_at", models.DateTimeField(blank=True, null=True)),
                ("cancel_refused_at", models.DateTimeField(blank=True, null=True)),
                ("attempt_started_at", models.DateTimeField(blank=True, null=True)),
                ("concurrency_key", models.TextField(blank=True, null=True)),
                ("concurrency_limit", models.IntegerField(blank=True, null=True)),
                ("concurrency_while_waiting", models.BooleanField(db_default=False)),
                ("debounce_key", models.TextField(blank=True, null=True)),
                ("debounce_until", models.DateTimeField(blank=True, null=True)),
                ("held_by", models.TextField(blank=True, null=True)),
                ("rate_key", models.TextField(blank=True, null=True)),
                ("rate_limit", models.IntegerField(blank=True, null=True)),
                ("rate_per", models.FloatField(blank=True, null=True)),
                ("progress", models.JSONField(blank=True, null=True)),
                ("trace_context", models.JSONField(blank=True, null=True)),
                ("awaited_token", models.IntegerField(blank=True, null=True)),
                ("awaiting_children", models.IntegerField(blank=True, null=True)),
                ("deadline", models.DateTimeField(blank=True, null=True)),
                ("parked_at", models.DateTimeField(blank=True, null=True)),
                ("forked_from", models.JSONField(blank=True, null=True)),
            ],
            options={
                "verbose_name": "run",
                "db_table": "durable_run",
                "permissions": [
                    ("cancel_run", "Can cancel durable runs"),
                    ("retry_run", "Can resume and retry durable runs"),
                    ("signal_run", "Can emit signals to durable runs"),
                    ("pause_run", "Can pause and unpause durable functions and queues"),
                    ("fork_run", "Can fork durable runs"),
                    ("resume_run_on_version", "Can resume durable runs on another version"),
                ],
                "indexes": [
                    models.Index(fields=["status", "name", "created_at"], name="durable_run_status_name"),
                    models.Index(
                        fields=["tenant_id", "status", "name", "created_at"], name="durable_run_tenant_status"
                    ),
                    models.Index(fields=["status", "updated_at"], name="durable_run_purge"),
                    models.Index(
                        condition=models.Q(("available_at__isnull", False), ("status", "pending")),
                        fields=["available_at"],
                        name="durable_run_delayed",
                    ),
                    models.Index(
                        condition=models.Q(("status", "waiting")), fields=["available_at"], name="durable_run_due_waits"
                    ),
                    models.Index(
                        condition=models.Q(("status", "running")), fields=["leased_until"], name="durable_run_leases"
                    ),
                    models.Index(
                        condition=models.Q(("coalesce_key__isnull", False)),
                        fields=["coalesce_key"],
                        name="durable_run_coalesce_key",
                    ),
                    models.Index(
                        condition=models.Q(("status", "waiting")), fields=["run_id"], name="durable_run_waiting"
                    ),
                    models.Index(
                        condition=models.Q(("parent_run_id__isnull", False)),
                        fields=["parent_run_id", "run_id"],
                        name="durable_run_children",
                    ),
                    models.Index(
                        models.OrderBy(models.F("priority"), descending=True),
                        models.F("created_at"),
                        condition=models.Q(("held_by__isnull", True), ("status", "pending")),
                        name="durable_run_claim_pending",
                    ),
                    models.Index(
                        models.F("held_by"),
                        models.OrderBy(models.F("priority"), descending=True),
                        models.F("created_at"),
                        condition=models.Q(("held_by__isnull", False), ("status", "pending")),
                        name="durable_run_held",
                    ),
                    models.Index(
                        models.F("concurrency_key"),
                        models.OrderBy(models.F("priority"), descending=True),
                        models.F("created_at"),
                        condition=models.Q(
                            ("concurrency_key__isnull", False), ("held_by__isnull", True), ("status", "pending")
                        ),
                        name="durable_run_key_due",
                    ),
                    models.Index(
                        condition=models.Q(
                            ("concurrency_key__isnull", False),
                            models.Q(
                                ("status", "running"),
                                models.Q(
                                    ("concurrency_while_waiting", True),
                                    ("started_at__isnull", False),
                                    ("status__in", ["pending", "waiting"]),
                                ),
                                _connector="OR",
                            ),
                        ),
                        fields=["concurrency_key"],
                        name="durable_run_slot_holders",
                    ),
                    models.Index(
                        models.F("rate_key"),
                        models.OrderBy(models.F("priority"), descending=True),
                        models.F("created_at"),
                        condition=models.Q(
                            ("held_by__isnull", True), ("rate_key__isnull", False), ("status", "pending")
                        ),
                        name="durable_run_rate_due",
                    ),
                    models.Index(
                        condition=models.Q(("status", "pending")),
                        fields=["name", "version", "available_at", "updated_at"],
                        name="durable_run_pending_versions",
                    ),
                    models.Index(
                        condition=models.Q(
                            ("deadline__isnull", False), ("status__in", ["pending", "running", "waiting"])
                        ),
                        fields=["deadline"],
                        name="durable_run_deadlines",
                    ),
                    models.Index(fields=["created_at", "run_id"], include=("status",), name="durable_run_listing"),
                    models.Index(fields=["tenant_id", "created_at", "run_id"], name="durable_run_tenant_listing"),
                    models.Index(fields=["status", "created_at", "run_id"], name="durable_run_status_listing"),
                    models.Index(
                        models.F("queue"),
                        models.OrderBy(models.F("priority"), descending=True),
                        models.F("created_at"),
                        condition=models.Q(("held_by__isnull", True), ("status", "pending")),
                        name="durable_run_claim_queue",
                    ),
                    models.Index(
                        models.F("tenant_id"),
                        models.OrderBy(models.F("priority"), descending=True),
                        models.F("created_at"),
                        condition=models.Q(
                            ("held_by__isnull", True), ("status", "pending"), ("tenant_id__isnull", False)
                        ),
                        name="durable_run_claim_tenant",
                    ),
                    models.Index(fields=["name", "created_at", "run_id"], name="durable_run_name_listing"),
                    models.Index(
                        condition=models.Q(("parked_at__isnull", False), ("status", "waiting")),
                        fields=["parked_at"],
                        name="durable_run_parked",
                    ),
                ],
                "constraints": [
                    models.UniqueConstraint(fields=("idempotency_key",), name="durable_run_idempotency_key_key"),
                    models.UniqueConstraint(
                        condition=models.Q(("attempts", 0), ("status", "pending")),
                        fields=("coalesce_key",),
                        name="durable_run_coalesce_key_pending",
                    ),
                    models.CheckConstraint(
                        condition=models.Q(("priority__gte", -100), ("priority__lte", 100)),
                        name="durable_run_priority_range",
                    ),
                    models.UniqueConstraint(
                        condition=models.Q(("attempts", 0), ("status", "pending")),
                        fields=("debounce_key",),
                        name="durable_run_debounce_key_pending",
                    ),
                ],
            },
        ),
        migrations.CreateModel(
            name="Schedule",
            fields=[
                ("schedule_id", models.TextField(primary_key=True, serialize=False)),
                ("name", models.TextField()),
                ("cron", models.TextField()),
                ("tz", models.TextField(blank=True, null=True)),
                ("input", models.JSONField(blank=True, null=True)),
                ("next_fire_at", models.DateTimeField()),
                ("enabled", models.BooleanField(db_default=True)),
                ("tenant_id", models.UUIDField(blank=True, null=True)),
                ("source", models.TextField(db_default="api")),
                ("last_fired_at", models.DateTimeField(blank=True, null=True)),
                ("created_at", models.DateTimeField(db_default=django.db.models.functions.datetime.Now())),
                ("updated_at", models.DateTimeField(db_default=django.db.models.functions.datetime.Now())),
                ("buffered_tick", models.DateTimeField(blank=True, null=True)),
                ("catchup_window", models.DurationField(blank=True, null=True)),
                ("jitter", models.DurationField(blank=True, null=True)),
                ("overlap", models.TextField(db_default="allow_all")),
                ("pause_on_failure", models.BooleanField(db_default=False)),
                ("paused_reason", models.TextField(blank=True, null=True)),
            ],
            options={
                "verbose_name": "schedule",
                "db_table": "durable_schedule",
                "permissions": [("fire_schedule", "Can fire durable schedules now")],
                "indexes": [
                    models.Index(
                        condition=models.Q(("enabled", True)), fields=["next_fire_at"], name="durable_schedule_due"
                    ),
                    models.Index(
                        condition=models.Q(("enabled", True)),
                        fields=["tenant_id", "next_fire_at"],
                        name="durable_schedule_tenant_due",
                    ),
                    models.Index(
                        condition=models.Q(("buffered_tick__isnull", False), ("enabled", True)),
                        fields=["buffered_tick"],
                        name="durable_schedule_buffered",
                    ),
                ],
                "constraints": [
                    models.CheckConstraint(
                        condition=models.Q(("overlap__in", ["allow_all", "skip", "buffer_one", "cancel_previous"])),
                        name="durable_schedule_overlap_known",
                    )
                ],
            },
        ),
        migrations.CreateModel(
            name="RateStart",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("key", models.TextField()),
                ("started_at", models.DateTimeField(db_default=django.db.models.functions.datetime.Now())),
                ("expires_at", models.DateTimeField()),
                ("starts", models.IntegerField(db_default=1)),
                ("total", models.BigIntegerField()),
            ],
            options={
                "verbose_name": "rate-limited start",
                "db_table": "durable_rate_start",
                "indexes": [
                    models.Index(fields=["key", "started_at"], name="durable_rate_start_window"),
                    models.Index(fields=["expires_at"], name="durable_rate_start_expiry"),
                ],
            },
        ),
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(schema_sql("durable_worker", 1), reverse_sql="DROP TABLE durable_worker")
            ],
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
        ),
        migrations.CreateModel(
            name="Event",
            fields=[
                (
                    "pk",
                    models.CompositePrimaryKey(
                        "run_id", "key", blank=True, editable=False, primary_key=True, serialize=False
                    ),
                ),
                ("run_id", models.TextField()),
                ("key", models.TextField()),
                ("value", models.JSONField()),
                ("attempt", models.IntegerField()),
                ("body_writes", models.IntegerField(db_default=0)),
                ("tenant_id", models.UUIDField(blank=True, null=True)),
                ("updated_at", models.DateTimeField(db_default=django.db.models.functions.datetime.Now())),
            ],
            options={
                "verbose_name": "event",
                "db_table": "durable_event",
            },
        ),
        migrations.CreateModel(
            name="Stream",
            fields=[
                (
                    "pk",
                    models.CompositePrimaryKey(
                        "run_id", "key", blank=True, editable=False, primary_key=True, serialize=False
                    ),
                ),
                ("run_id", models.TextField()),
                ("key", models.TextField()),
                ("next_offset", models.IntegerField(db_default=0)),
                ("body_writes", models.IntegerField(db_default=0)),
                ("closed_at", models.DateTimeField(blank=True, null=True)),
                ("tenant_id", models.UUIDField(blank=True, null=True)),
                ("created_at", models.DateTimeField(db_default=django.db.models.functions.datetime.Now())),
            ],
            options={
                "verbose_name": "stream",
                "db_table": "durable_stream",
            },
        ),
        migrations.CreateModel(
            name="StreamItem",
            fields=[
                (
                    "pk",
                    models.CompositePrimaryKey(
                        "run_id", "key", "offset", blank=True, editable=False, primary_key=True, serialize=False
                    ),
                ),
                ("run_id", models.TextField()),
                ("key", models.TextField()),
                ("offset", models.IntegerField(db_column="item_offset")),
                ("value", models.JSONField()),
                ("attempt", models.IntegerField()),
                ("written_at", models.DateTimeField(db_default=django.db.models.functions.datetime.Now())),
                ("tenant_id", models.UUIDField(blank=True, null=True)),
            ],
            options={
                "verbose_name": "stream item",
                "db_table": "durable_stream_item",
            },
        ),
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(
                    schema_sql("durable_lease_renewal", 1), reverse_sql="DROP TABLE durable_lease_renewal"
                )
            ],
            state_operations=[
                migrations.CreateModel(
                    name="LeaseRenewal",
                    fields=[
                        ("run_id", models.TextField(primary_key=True, serialize=False)),
                        ("token", models.IntegerField()),
                        ("leased_until", models.DateTimeField()),
                    ],
                    options={
                        "verbose_name": "lease renewal",
                        "db_table": "durable_lease_renewal",
                    },
                ),
            ],
        ),
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
            options={
                "verbose_name": "attempt",
                "db_table": "durable_attempt",
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
        migrations.CreateModel(
            name="ReplayDivergence",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("run_id", models.TextField(db_index=True)),
                ("attempt", models.IntegerField()),
                ("step_id", models.TextField()),
                ("unasked", models.JSONField(default=list)),
                ("created_at", models.DateTimeField(db_default=django.db.models.functions.datetime.Now())),
            ],
            options={
                "verbose_name": "replay divergence",
                "db_table": "durable_replay_divergence",
            },
        ),
        migrations.CreateModel(
            name="ScheduleRun",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("schedule_id", models.TextField()),
                ("tick", models.DateTimeField(blank=True, null=True)),
                ("run_id", models.TextField()),
                ("created_at", models.DateTimeField(db_default=django.db.models.functions.datetime.Now())),
                ("outcome", models.TextField(blank=True, null=True)),
            ],
            options={
                "verbose_name": "schedule run",
                "db_table": "durable_schedule_run",
                "indexes": [
                    models.Index(fields=["schedule_id", "-id"], name="durable_schedule_run_recent"),
                    models.Index(fields=["run_id"], name="durable_schedule_run_run"),
                    models.Index(
                        condition=models.Q(("outcome__isnull", True)),
                        fields=["schedule_id"],
                        name="durable_schedule_run_open",
                    ),
                ],
                "constraints": [
                    models.UniqueConstraint(fields=("schedule_id", "tick"), name="durable_schedule_run_tick")
                ],
            },
        ),
        migrations.RunPython(drop_pattern_indexes, migrations.RunPython.noop),
        migrations.RunSQL(
            "CREATE STATISTICS durable_run_status_queue (mcv) ON status, queue FROM durable_run",
            reverse_sql="DROP STATISTICS durable_run_status_queue",
        ),
        migrations.RunSQL(
            "ALTER TABLE durable_run SET (autovacuum_vacuum_scale_factor = 0.002, autovacuum_vacuum_threshold = 1000,"
            " vacuum_index_cleanup = on, autovacuum_vacuum_insert_scale_factor = 0.002,"
            " autovacuum_vacuum_insert_threshold = 1000, autovacuum_analyze_scale_factor = 0.01)",
            reverse_sql=migrations.RunSQL.noop,
        ),
        migrations.RunSQL(
            "ALTER TABLE durable_step SET (autovacuum_vacuum_scale_factor = 0.01)", reverse_sql=migrations.RunSQL.noop
        ),
        migrations.RunSQL(
            "CREATE INDEX durable_run_input ON durable_run USING gin (input jsonb_path_ops)",
            reverse_sql="DROP INDEX durable_run_input",
        ),
        migrations.RunSQL(schema_sql("durable_admit", 4), reverse_sql="DROP FUNCTION durable_admit"),
        migrations.RunSQL(schema_sql("durable_release_held", 1), reverse_sql="DROP FUNCTION durable_release_held"),
        migrations.RunSQL(
            schema_sql("durable_attempt_ended", 1),
            reverse_sql="DROP TRIGGER durable_attempt_ended ON durable_run; DROP FUNCTION durable_attempt_ended",
        ),
        migrations.RunSQL(schema_sql("durable_hold_paused", 1), reverse_sql="DROP FUNCTION durable_hold_paused"),
    ]
