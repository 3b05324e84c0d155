"""Checks a worker makes before it claims anything."""

from django.db.migrations.executor import MigrationExecutor

from ..exceptions import MigrationsNotApplied
from ..store.db import connection


def missing_migrations() -> list[str]:
    """The durable_django migrations not applied to the durable database, as ``app.name``, in order."""
    executor = MigrationExecutor(connection())
    targets = [key for key in executor.loader.graph.leaf_nodes() if key[0] == "durable_django"]
    return [f"{migration.app_label}.{migration.name}" for migration, _ in executor.migration_plan(targets)]


def ensure_migrated() -> None:
    """Refuse to start on a database whose durable_django migrations are not all applied."""
    conn = connection()
    plan = missing_migrations()
    if plan:
        missing = ", ".join(plan)
        raise MigrationsNotApplied(
            f"durable_django migrations are not applied to database {conn.alias!r} ({missing}). "
            f"Run `manage.py migrate durable_django --database {conn.alias}` first."
        )
