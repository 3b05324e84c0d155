from django.db import migrations

from durable_django.store.schema import schema_sql

# A due run a full limit keeps back is held whatever its kind (store/schema/durable_admit.v4.sql says what
# changed).
ADMIT = schema_sql("durable_admit", 4)


class Migration(migrations.Migration):
    """A due run a full limit keeps back is held whatever its kind: it never blocks the claim."""

    dependencies = [
        ("durable_django", "0015_lease_renewals"),
    ]

    operations = [
        migrations.RunSQL(ADMIT, reverse_sql=schema_sql("durable_admit", 3)),
    ]
