from django.db import migrations, models


class Migration(migrations.Migration):
    """The idempotency key's unique index covers only runs that have a key.

    Most runs have none, and every write of a run that is not heap-only (its claim, its start, its
    landing) wrote an index entry of its NULL key. The partial index is built without locking out
    enqueues, then takes the constraint's place and name (the store reads that name in errors).
    """

    atomic = False

    dependencies = [
        ("durable_django", "0023_translations"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RemoveConstraint(model_name="run", name="durable_run_idempotency_key_key"),
                migrations.AddConstraint(
                    model_name="run",
                    constraint=models.UniqueConstraint(
                        condition=models.Q(idempotency_key__isnull=False),
                        fields=("idempotency_key",),
                        name="durable_run_idempotency_key_key",
                    ),
                ),
            ],
            database_operations=[
                migrations.RunSQL(
                    [
                        "CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS durable_run_idempotency_key_partial "
                        "ON durable_run (idempotency_key) WHERE idempotency_key IS NOT NULL",
                        "ALTER TABLE durable_run DROP CONSTRAINT IF EXISTS durable_run_idempotency_key_key",
                        "ALTER INDEX durable_run_idempotency_key_partial RENAME TO durable_run_idempotency_key_key",
                    ],
                    reverse_sql=[
                        "ALTER INDEX durable_run_idempotency_key_key RENAME TO durable_run_idempotency_key_partial",
                        "ALTER TABLE durable_run ADD CONSTRAINT durable_run_idempotency_key_key UNIQUE (idempotency_key)",
                        "DROP INDEX CONCURRENTLY IF EXISTS durable_run_idempotency_key_partial",
                    ],
                ),
            ],
        ),
    ]
