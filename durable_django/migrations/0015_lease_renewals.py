from django.db import migrations, models

from durable_django.store.schema import schema_sql

# Created by hand: a text primary key made by Django gets a text_pattern_ops index beside it (see 0002).
CREATE = schema_sql("durable_lease_renewal", 1)


class Migration(migrations.Migration):
    """Leases renewed while a client transaction holds the run's row lock (store/leases.py)."""

    dependencies = [
        ("durable_django", "0014_admin_filter_indexes"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunSQL(CREATE, reverse_sql="DROP TABLE durable_lease_renewal")],
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
    ]
