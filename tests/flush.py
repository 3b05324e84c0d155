"""Emptying the test database after a ``transaction=True`` test: only what the test wrote.

Django's TransactionTestCase empties the database by truncating every table, then lets
post_migrate create the content types and permissions again. A TRUNCATE costs about the same
whether a table holds rows or not (PostgreSQL gives the table and each of its indexes new files),
and most tables are empty after most tests, so over the suite's hundreds of transactional tests
that was a large share of its time. Here the flush truncates the tables that hold rows, with the
tables that reference them (TRUNCATE refuses to leave a reference dangling), and keeps the content
types and permissions while they are exactly what the last post_migrate left (the same number of
rows, the same highest id): post_migrate then finds every one and writes nothing. The database a
test starts from is the one Django's own flush would leave.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from django.apps import apps
from django.db import connections
from django.db.backends.postgresql.operations import DatabaseOperations
from django.db.models.signals import post_migrate

# The tables post_migrate fills; kept while they hold what it left.
POST_MIGRATE_TABLES = ("django_content_type", "auth_permission")
FINGERPRINT = " UNION ALL ".join(
    f"SELECT '{table}', count(*), coalesce(max(id), 0) FROM {table}" for table in POST_MIGRATE_TABLES
)
REFERENCES = """
SELECT referencing.relname, referenced.relname
FROM pg_constraint
JOIN pg_class referencing ON referencing.oid = pg_constraint.conrelid
JOIN pg_class referenced ON referenced.oid = pg_constraint.confrelid
WHERE pg_constraint.contype = 'f' AND referencing.relnamespace = current_schema()::regnamespace
"""

# Alias -> the fingerprint of its post_migrate tables as post_migrate last left them.
_left_by_post_migrate: dict[str, list[tuple]] = {}


def _fingerprint(cursor) -> list[tuple]:
    cursor.execute(FINGERPRINT)
    return sorted(cursor.fetchall())


def _holding_rows(cursor, tables: list[str], quote) -> set[str]:
    cursor.execute(
        " UNION ALL ".join(f"SELECT %s WHERE EXISTS (SELECT FROM {quote(table)})" for table in tables), tables
    )
    return {row[0] for row in cursor.fetchall()}


def _with_referencing(cursor, chosen: set[str], tables: list[str]) -> set[str]:
    cursor.execute(REFERENCES)
    referencing: dict[str, set[str]] = {}
    for child, parent in cursor.fetchall():
        referencing.setdefault(parent, set()).add(child)
    pending = list(chosen)
    while pending:
        for child in referencing.get(pending.pop(), ()):
            if child in tables and child not in chosen:
                chosen.add(child)
                pending.append(child)
    return chosen


def sql_flush(self, style, tables, *, reset_sequences=False, allow_cascade=False):
    """Django's TRUNCATE, of the tables that need it."""
    alias = self.connection.alias
    tables = list(tables)
    if tables and not reset_sequences:
        with self.connection.cursor() as cursor:
            chosen = _holding_rows(cursor, tables, self.quote_name)
            if all(table in tables for table in POST_MIGRATE_TABLES):
                if _left_by_post_migrate.get(alias) == _fingerprint(cursor):
                    chosen -= set(POST_MIGRATE_TABLES)
                else:
                    chosen |= set(POST_MIGRATE_TABLES)  # truncated and made again, as Django does
                    _left_by_post_migrate.pop(alias, None)
            chosen = _with_referencing(cursor, chosen, tables)
        tables = [table for table in tables if table in chosen]
    return _django_sql_flush(self, style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade)


def _remember(sender, using, **kwargs) -> None:
    """After post_migrate's last app (emit_post_migrate_signal goes through those with models in order): what the
    post_migrate tables hold."""
    if sender is not [app for app in apps.get_app_configs() if app.models_module is not None][-1]:
        return
    with connections[using].cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_class WHERE relname = ANY(%s)", [list(POST_MIGRATE_TABLES)])
        if cursor.fetchone()[0] == len(POST_MIGRATE_TABLES):
            _left_by_post_migrate[using] = _fingerprint(cursor)


_django_sql_flush = DatabaseOperations.sql_flush


@contextmanager
def truncating_what_was_written() -> Iterator[None]:
    """For the block: the flush above, and post_migrate's results remembered."""
    DatabaseOperations.sql_flush = sql_flush
    post_migrate.connect(_remember, dispatch_uid="tests.flush")
    try:
        yield
    finally:
        post_migrate.disconnect(dispatch_uid="tests.flush")
        DatabaseOperations.sql_flush = _django_sql_flush
        _left_by_post_migrate.clear()
