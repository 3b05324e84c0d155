import django.db.models.functions.datetime
from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True

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
            ],
            options={
                "verbose_name": "run",
                "db_table": "durable_run",
                "permissions": [
                    ("cancel_run", "Can cancel durable runs"),
                    ("retry_run", "Can resume and retry durable runs"),
                    ("signal_run", "Can emit signals to durable runs"),
                ],
                "indexes": [
                    models.Index(fields=["status", "name", "created_at"], name="durable_run_status_name"),
                    models.Index(
                        fields=["tenant_id", "status", "name", "created_at"], name="durable_run_tenant_status"
                    ),
                    models.Index(fields=["status", "updated_at"], name="durable_run_purge"),
                    models.Index(
                        models.OrderBy(models.F("created_at"), descending=True),
                        models.OrderBy(models.F("run_id"), descending=True),
                        name="durable_run_listing",
                    ),
                    models.Index(
                        models.F("tenant_id"),
                        models.OrderBy(models.F("created_at"), descending=True),
                        models.OrderBy(models.F("run_id"), descending=True),
                        name="durable_run_tenant_listing",
                    ),
                    models.Index(
                        models.OrderBy(models.F("priority"), descending=True),
                        models.F("created_at"),
                        condition=models.Q(("status", "pending")),
                        name="durable_run_claim_pending",
                    ),
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
                        condition=models.Q(("parent_run_id__isnull", False)),
                        fields=["parent_run_id"],
                        name="durable_run_children",
                    ),
                    models.Index(
                        condition=models.Q(("coalesce_key__isnull", False)),
                        fields=["coalesce_key"],
                        name="durable_run_coalesce_key",
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
                ],
            },
        ),
    ]
