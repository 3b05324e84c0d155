from django.db import migrations

from durable_django.store.schema import schema_sql

# A saturated rate key's new held runs queue behind the ones it holds already
# (store/schema/durable_admit.v3.sql says what changed).
ADMIT = schema_sql("durable_admit", 3)


class Migration(migrations.Migration):
    """A saturated rate key's newly held runs wait behind the runs it holds already."""

    dependencies = [
        ("durable_django", "0011_rate_start_batches"),
    ]

    operations = [
        migrations.RunSQL(ADMIT, reverse_sql=schema_sql("durable_admit", 2)),
    ]
