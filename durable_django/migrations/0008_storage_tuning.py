from django.db import migrations, models

# The run table is vacuumed after 10,000 dead row versions whatever its size, not after PostgreSQL's 20% of
# its rows: its live runs are a sliver of a large table, and their dead versions (every claim, renewal and
# landing leaves one) must not wait for millions more; likewise after 10,000 inserts, so its pages become
# all-visible for index-only scans. It is analyzed after 1% of its rows changed (PostgreSQL: 10%), so the
# planner's view of pending and running runs follows the backlog. The journal is written once and deleted
# by the purge: vacuumed after 1% of its rows died (PostgreSQL: 20%).
RUN_STORAGE = {
    "autovacuum_vacuum_scale_factor": "0",
    "autovacuum_vacuum_threshold": "10000",
    "autovacuum_vacuum_insert_scale_factor": "0",
    "autovacuum_vacuum_insert_threshold": "10000",
    "autovacuum_analyze_scale_factor": "0.01",
}
STEP_STORAGE = {"autovacuum_vacuum_scale_factor": "0.01"}


def storage(table: str, parameters: dict[str, str]) -> migrations.RunSQL:
    """Set a table's storage parameters (no rewrite, no long lock); reversed by resetting them."""
    return migrations.RunSQL(
        sql=f"ALTER TABLE {table} SET ({', '.join(f'{name} = {value}' for name, value in parameters.items())})",
        reverse_sql=f"ALTER TABLE {table} RESET ({', '.join(parameters)})",
    )


class Migration(migrations.Migration):
    """Storage for ten million runs: the listing index carries each run's status (the overview counts from the
    index alone), a listing index per status, and per-table autovacuum settings (docs/guide.md, "The schema").

    No field changes. On a large table, build the indexes first with CREATE INDEX CONCURRENTLY (docs/guide.md,
    "The schema"); the storage parameters apply at once and rewrite nothing.
    """

    dependencies = [
        ("durable_django", "0007_observability"),
    ]

    operations = [
        migrations.RemoveIndex(
            model_name="run",
            name="durable_run_listing",
        ),
        migrations.AddIndex(
            model_name="run",
            index=models.Index(
                models.OrderBy(models.F("created_at"), descending=True),
                models.OrderBy(models.F("run_id"), descending=True),
                include=("status",),
                name="durable_run_listing",
            ),
        ),
        migrations.AddIndex(
            model_name="run",
            index=models.Index(
                models.F("status"),
                models.OrderBy(models.F("created_at"), descending=True),
                models.OrderBy(models.F("run_id"), descending=True),
                name="durable_run_status_listing",
            ),
        ),
        storage("durable_run", RUN_STORAGE),
        storage("durable_step", STEP_STORAGE),
    ]
