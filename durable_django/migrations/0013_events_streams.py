import django.db.models.functions.datetime
from django.db import migrations, models


class Migration(migrations.Migration):
    """Events and streams a run publishes while it runs: the latest value per key, and ordered items."""

    dependencies = [
        ("durable_django", "0012_rate_hold_queue"),
    ]

    operations = [
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
    ]
