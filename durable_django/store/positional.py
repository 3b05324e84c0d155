"""Long statements with their placeholders converted once, not at every execution.

psycopg turns a statement's ``%(name)s`` placeholders into PostgreSQL's ``$1``
at each execution, and keeps the result only for statements of up to 4 KB. The
claim statement is about 10 KB: converting it cost the claim loop about half a
millisecond of CPU per claim, with the GIL held. A ``PositionalStatement``
converts it once; it is then sent as it is, through psycopg's raw cursor, with
its parameters in order. Where Django must see the statement (queries logged,
execute wrappers installed), the named form goes through ``db.cursor()``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import psycopg
from django.db import connections

from ..conf import durable_settings
from .db import Row, StoreAdapting, connected, cursor_on, store_adapters

# A named placeholder, a literal percent sign, or any other placeholder (refused).
_PLACEHOLDER = re.compile(r"%\((?P<name>\w+)\)s|(?P<percent>%%)|(?P<other>%.)")


@dataclass(frozen=True, slots=True)
class PositionalStatement:
    """A statement in both forms: as written (named placeholders) and as PostgreSQL takes it ($1, $2, ...)."""

    named: str
    positional: str
    # The parameter each $n stands for, in order ($1 first).
    names: tuple[str, ...]

    @classmethod
    def of(cls, named: str) -> PositionalStatement:
        """Convert ``named``: a name used twice is one parameter; ``%%`` is a percent sign.

        Raises:
            ValueError: a placeholder other than ``%(name)s`` (a positional ``%s``, a binary ``%(name)b``).
        """
        order: dict[str, int] = {}

        def replace(match: re.Match[str]) -> str:
            if match.group("percent"):
                return "%"
            name = match.group("name")
            if name is None:
                raise ValueError(f"only %(name)s placeholders are converted, not {match.group('other')!r}")
            return f"${order.setdefault(name, len(order) + 1)}"

        positional = _PLACEHOLDER.sub(replace, named)
        return cls(named, positional, tuple(order))

    def values(self, params: Mapping[str, Any]) -> list[Any]:
        return [params[name] for name in self.names]


class _StoreRawCursor(StoreAdapting, psycopg.RawCursor[Any]):
    __slots__ = ("_loading",)


def fetch_all(statement: PositionalStatement, params: Mapping[str, Any]) -> list[Row]:
    """Run ``statement`` on this thread's durable connection and return its rows."""
    conn = connections[durable_settings.DATABASE]
    if conn.queries_logged or conn.execute_wrappers:
        with cursor_on(conn) as cur:
            cur.execute(statement.named, params)
            return list(cur.fetchall())
    raw = connected(conn)
    conn.validate_thread_sharing()
    conn.validate_no_broken_transaction()
    loading = store_adapters(raw, conn)
    raw_cursor = psycopg.RawCursor(raw) if loading is None else _StoreRawCursor(raw, loading)
    with conn.wrap_database_errors, raw_cursor as cur:
        cur.execute(statement.positional, statement.values(params))
        return list(cur.fetchall())
