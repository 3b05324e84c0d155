from django.db import migrations, models

# The run table is vacuumed once 0.2% of its rows (plus 1,000) are dead, not PostgreSQL's 20%, and always
# with its indexes: its live runs are a sliver of a large table, so their dead versions (every claim, renewal
# and landing leaves one in each index it touches) sit on under 2% of its pages, where PostgreSQL would skip
# the indexes and leave those pages' space unrecorded (the table then grows by every dead version). It is
# vacuumed after as many inserts (its pages become all-visible for index-only scans), and analyzed once 1%
# of its rows changed (PostgreSQL: 10%), so the planner's view of pending and running runs follows the
# backlog. The journal is written once and deleted by the purge: vacuumed once 1% of its rows are dead.
RUN_STORAGE = {
    "autovacuum_vacuum_scale_factor": "0.002",
    "autovacuum_vacuum_threshold": "1000",
    "vacuum_index_cleanup": "on",
    "autovacuum_vacuum_insert_scale_factor": "0.002",
    "autovacuum_vacuum_insert_threshold": "1000",
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
    """Storage for ten million runs: ascending listing indexes (half the size of descending ones), the first
    carrying each run's status (the overview counts from the index alone), a listing index per status, and
    per-table vacuum settings (docs/guide.md, "The schema", "Large tables").

    No field changes. On a large table, build the indexes by hand with CREATE INDEX CONCURRENTLY first
    (docs/guide.md, "Large tables"); the storage parameters apply at once and rewrite nothing.
    """

    dependencies = [
        ("durable_django", "0008_fanout_deadlines"),
    ]

    operations = [
        migrations.RemoveIndex(model_name="run", name="durable_run_listing"),
        migrations.RemoveIndex(model_name="run", name="durable_run_tenant_listing"),
        migrations.AddIndex(
            model_name="run",
            index=models.Index(fields=["created_at", "run_id"], include=("status",), name="durable_run_listing"),
        ),
        migrations.AddIndex(
            model_name="run",
            index=models.Index(fields=["tenant_id", "created_at", "run_id"], name="durable_run_tenant_listing"),
        ),
        migrations.AddIndex(
            model_name="run",
            index=models.Index(fields=["status", "created_at", "run_id"], name="durable_run_status_listing"),
        ),
        storage("durable_run", RUN_STORAGE),
        storage("durable_step", STEP_STORAGE),
    ]
