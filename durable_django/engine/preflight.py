"""Checks a worker makes before it claims anything."""

from django.db.migrations.executor import MigrationExecutor

from ..exceptions import MigrationsNotApplied
from ..store.db import connection


def ensure_migrated() -> None:
    """Refuse to start on a database whose durable_django migrations are not all applied."""
    conn = connection()
    executor = MigrationExecutor(conn)
    targets = [key for key in executor.loader.graph.leaf_nodes() if key[0] == "durable_django"]
    plan = executor.migration_plan(targets)
    if plan:
        missing = ", ".join(f"{migration.app_label}.{migration.name}" for migration, _ in plan)
        raise MigrationsNotApplied(
            f"durable_django migrations are not applied to database {conn.alias!r} ({missing}). "
            f"Run `manage.py migrate durable_django --database {conn.alias}` first."
        )
