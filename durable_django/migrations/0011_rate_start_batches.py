from django.db import migrations, models

from durable_django.store.schema import schema_sql

# A rate key's window counted in two index probes, its starts recorded in one row an admission
# (store/schema/durable_admit.v2.sql says what changed).
ADMIT = schema_sql("durable_admit", 2)

# The running totals of the starts already recorded, one start a row, in their order per key.
NUMBER_STARTS = """
UPDATE durable_rate_start s SET total = numbered.total
FROM (SELECT id, row_number() OVER (PARTITION BY key ORDER BY started_at, id) AS total FROM durable_rate_start) numbered
WHERE s.id = numbered.id
"""


class Migration(migrations.Migration):
    """A rate key's admission counts its window in two index probes, and records its starts in one row."""

    dependencies = [
        ("durable_django", "0010_claim_by_queue_and_tenant"),
    ]

    operations = [
        migrations.AddField(
            model_name="ratestart",
            name="starts",
            field=models.IntegerField(db_default=1),
        ),
        migrations.AddField(
            model_name="ratestart",
            name="total",
            field=models.BigIntegerField(default=0),
            preserve_default=False,
        ),
        migrations.RunSQL(NUMBER_STARTS, reverse_sql=migrations.RunSQL.noop),
        migrations.RunSQL(ADMIT, reverse_sql=schema_sql("durable_admit", 1)),
    ]
