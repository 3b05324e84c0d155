from django.db import migrations, models
from django.db.models import F, Q

from durable_django.store.schema import schema_sql

# Admitting limited runs and releasing held ones, each in one call (store/flow.py).
ADMIT = schema_sql("durable_admit", 1)
RELEASE_HELD = schema_sql("durable_release_held", 1)


class Migration(migrations.Migration):
    """Flow control's admission and release as functions: one round trip each, locks then fresh counts."""

    dependencies = [
        ("durable_django", "0005_flow_control"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="run",
            index=models.Index(
                "rate_key",
                F("priority").desc(),
                "created_at",
                condition=Q(status="pending", held_by__isnull=True, rate_key__isnull=False),
                name="durable_run_rate_due",
            ),
        ),
        migrations.RunSQL(ADMIT, reverse_sql="DROP FUNCTION IF EXISTS durable_admit"),
        migrations.RunSQL(RELEASE_HELD, reverse_sql="DROP FUNCTION IF EXISTS durable_release_held"),
    ]
