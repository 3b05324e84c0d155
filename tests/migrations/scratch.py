"""Fresh databases on the test server, migrated by Django's executor, and a dump of what they hold.

The dump reads PostgreSQL's catalog, not Django's state: tables and their storage parameters, columns in
order with their types, defaults and identities, indexes, constraints, extended statistics, functions by
their full definition and triggers, so two databases compare equal only when their schemas are the same.
"""

import contextlib
import copy
import uuid

from django.db import connections
from django.db.migrations.executor import MigrationExecutor
from django.db.migrations.loader import MigrationLoader
from django.db.utils import load_backend

APP = "durable_django"

_CATALOG = {
    "relations": """
        SELECT c.relname, c.relkind, coalesce(array_to_string(c.reloptions, ','), '')
        FROM pg_class c WHERE c.relnamespace = 'public'::regnamespace ORDER BY 1""",
    "columns": """
        SELECT c.relname, a.attnum, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull,
               coalesce(pg_get_expr(d.adbin, d.adrelid), ''), a.attidentity, a.attgenerated
        FROM pg_attribute a
        JOIN pg_class c ON c.oid = a.attrelid AND c.relnamespace = 'public'::regnamespace AND c.relkind = 'r'
        LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
        WHERE a.attnum > 0 AND NOT a.attisdropped ORDER BY 1, 2""",
    "indexes": "SELECT tablename, indexname, indexdef FROM pg_indexes WHERE schemaname = 'public' ORDER BY 1, 2",
    "constraints": """
        SELECT conrelid::regclass::text, conname, contype, pg_get_constraintdef(oid)
        FROM pg_constraint WHERE connamespace = 'public'::regnamespace ORDER BY 1, 2""",
    "statistics": """
        SELECT stxname, pg_get_statisticsobjdef(oid)
        FROM pg_statistic_ext WHERE stxnamespace = 'public'::regnamespace ORDER BY 1""",
    "functions": """
        SELECT p.proname, pg_get_function_identity_arguments(p.oid), pg_get_functiondef(p.oid)
        FROM pg_proc p WHERE p.pronamespace = 'public'::regnamespace ORDER BY 1, 2""",
    "triggers": """
        SELECT tgrelid::regclass::text, tgname, pg_get_triggerdef(oid)
        FROM pg_trigger WHERE NOT tgisinternal ORDER BY 1, 2""",
}


def catalog(connection) -> dict[str, list[tuple]]:
    """The schema of ``connection``'s database, section by section (see the module docstring)."""
    with connection.cursor() as cursor:
        dump = {}
        for section, query in _CATALOG.items():
            cursor.execute(query)
            dump[section] = [tuple(row) for row in cursor.fetchall()]
        return dump


def differences(left: dict[str, list[tuple]], right: dict[str, list[tuple]]) -> dict[str, dict[str, list]]:
    """Per section, the rows only one side holds (empty when the schemas are the same)."""
    found = {}
    for section in left.keys() | right.keys():
        only_left = sorted(set(left.get(section, [])) - set(right.get(section, [])))
        only_right = sorted(set(right.get(section, [])) - set(left.get(section, [])))
        if only_left or only_right:
            found[section] = {"only left": only_left, "only right": only_right}
    return found


@contextlib.contextmanager
def scratch_database():
    """A Django connection to a new, empty database on the test server, dropped afterwards whatever happened."""
    admin = connections["direct"]  # never through a pooler, which would keep sessions open on the database
    name = f"durable_squash_{uuid.uuid4().hex[:12]}"
    with admin.cursor() as cursor:
        cursor.execute(f'CREATE DATABASE "{name}"')
    admin.close()  # outside a test case nobody else closes it, and it would keep the test database in use
    settings = copy.deepcopy(admin.settings_dict)
    settings["NAME"] = name
    settings["TEST"] = {}
    alias = f"scratch_{name}"
    scratch = load_backend(settings["ENGINE"]).DatabaseWrapper(settings, alias=alias)
    # Registered under its alias: Django's atomic blocks (the schema editor's among them) look it up there.
    connections.settings[alias] = settings
    connections[alias] = scratch
    try:
        yield scratch
    finally:
        scratch.close()
        del connections[alias]
        del connections.settings[alias]
        with admin.cursor() as cursor:
            cursor.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()


def migrate(connection, target: str | None = None, *, squash: bool = True) -> None:
    """Migrate the app on ``connection`` to ``target`` (its latest migration when None).

    ``squash=False`` walks the replaced migrations one by one, as an install made before the squash did.
    """
    executor = MigrationExecutor(connection)
    if not squash:
        executor.loader = MigrationLoader(connection, replace_migrations=False)
    graph = executor.loader.graph
    if target is None:
        (leaf,) = [node for node in graph.leaf_nodes(APP) if squash or not executor.loader.replacements.get(node)]
        target = leaf[1]
    executor.migrate([(APP, target)])


def applied(connection) -> set[str]:
    """The app's migrations the database records as applied."""
    return {name for app, name in MigrationLoader(connection).applied_migrations if app == APP}
