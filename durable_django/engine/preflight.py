"""Checks a worker makes before it claims anything."""

from django.core.exceptions import ImproperlyConfigured
from django.db.migrations.executor import MigrationExecutor

from ..exceptions import MigrationsNotApplied
from ..settings_rules import setting_problems
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


def ensure_valid_settings() -> None:
    """Refuse to start on a ``DURABLE`` value that breaks its rule, even when system checks were skipped.

    A NaN lease or a queue limit past PostgreSQL's integer would make every
    claim of every worker fail, for as long as the worker runs.
    """
    errors = [problem for problem in setting_problems() if not problem.warning]
    if errors:
        raise ImproperlyConfigured(" ".join(f"{problem.message} [{problem.check_id}]" for problem in errors))
