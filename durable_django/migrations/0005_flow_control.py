import django.db.models.functions.datetime
from django.db import migrations, models


class Migration(migrations.Migration):
    """Flow control: limit keys on runs, held runs out of the claim index, rate-limited starts, debounce."""

    dependencies = [
        ("durable_django", "0004_reconciler_indexes"),
    ]

    operations = [
        migrations.CreateModel(
            name="RateStart",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("key", models.TextField()),
                ("started_at", models.DateTimeField(db_default=django.db.models.functions.datetime.Now())),
                ("expires_at", models.DateTimeField()),
            ],
            options={
                "verbose_name": "rate-limited start",
                "db_table": "durable_rate_start",
            },
        ),
        migrations.RemoveIndex(
            model_name="run",
            name="durable_run_claim_pending",
        ),
        migrations.AddField(
            model_name="run",
            name="concurrency_key",
            field=models.TextField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="run",
            name="concurrency_limit",
            field=models.IntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="run",
            name="concurrency_while_waiting",
            field=models.BooleanField(db_default=False),
        ),
        migrations.AddField(
            model_name="run",
            name="debounce_key",
            field=models.TextField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="run",
            name="debounce_until",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="run",
            name="held_by",
            field=models.TextField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="run",
            name="rate_key",
            field=models.TextField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="run",
            name="rate_limit",
            field=models.IntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="run",
            name="rate_per",
            field=models.FloatField(blank=True, null=True),
        ),
        migrations.AddIndex(
            model_name="run",
            index=models.Index(
                models.OrderBy(models.F("priority"), descending=True),
                models.F("created_at"),
                condition=models.Q(("held_by__isnull", True), ("status", "pending")),
                name="durable_run_claim_pending",
            ),
        ),
        migrations.AddIndex(
            model_name="run",
            index=models.Index(
                models.F("held_by"),
                models.OrderBy(models.F("priority"), descending=True),
                models.F("created_at"),
                condition=models.Q(("held_by__isnull", False), ("status", "pending")),
                name="durable_run_held",
            ),
        ),
        migrations.AddIndex(
            model_name="run",
            index=models.Index(
                models.F("concurrency_key"),
                models.OrderBy(models.F("priority"), descending=True),
                models.F("created_at"),
                condition=models.Q(
                    ("concurrency_key__isnull", False), ("held_by__isnull", True), ("status", "pending")
                ),
                name="durable_run_key_due",
            ),
        ),
        migrations.AddIndex(
            model_name="run",
            index=models.Index(
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
        ),
        migrations.AddConstraint(
            model_name="run",
            constraint=models.UniqueConstraint(
                condition=models.Q(("attempts", 0), ("status", "pending")),
                fields=("debounce_key",),
                name="durable_run_debounce_key_pending",
            ),
        ),
        migrations.AddIndex(
            model_name="ratestart",
            index=models.Index(fields=["key", "started_at"], name="durable_rate_start_window"),
        ),
        migrations.AddIndex(
            model_name="ratestart",
            index=models.Index(fields=["expires_at"], name="durable_rate_start_expiry"),
        ),
    ]
