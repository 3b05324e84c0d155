"""Reading a run's events and streams as committed, on a reader's own session (the client API's readers).

Each read takes the run's status in the same snapshot as what it reads, so a
finished run or a closed stream is never seen without what was committed before
it. This module writes nothing (see .importlinter).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg

from ..states import LIVE_STATUSES
from ..types import StreamItem
from .db import from_json

_VISIBLE_RUN = "r.run_id = %(run_id)s AND (%(tenant_id)s::uuid IS NULL OR r.tenant_id = %(tenant_id)s::uuid)"

# The run's status, whether the stream is closed, and its items after an offset, in one snapshot (so a
# finished run or a closed stream is never seen without the items committed before it).
READ_ITEMS = f"""
SELECT r.status, s.closed_at IS NOT NULL, i.item_offset, i.value::text, i.attempt, i.written_at
FROM durable_run r
LEFT JOIN durable_stream s ON s.run_id = r.run_id AND s.key = %(key)s
LEFT JOIN LATERAL (
    SELECT item_offset, value, attempt, written_at FROM durable_stream_item
    WHERE run_id = r.run_id AND key = %(key)s AND item_offset > %(after)s
    ORDER BY item_offset
    LIMIT %(limit)s
) i ON true
WHERE {_VISIBLE_RUN}
ORDER BY i.item_offset
"""

# The run's status and one event (none: the key has no value yet).
READ_EVENT = f"""
SELECT r.status, e.run_id IS NOT NULL, e.value::text
FROM durable_run r LEFT JOIN durable_event e ON e.run_id = r.run_id AND e.key = %(key)s
WHERE {_VISIBLE_RUN}
"""

# Every event of a run, by key (a run without any: one row of NULLs).
LIST_EVENTS = f"""
SELECT e.key, e.value::text
FROM durable_run r LEFT JOIN durable_event e ON e.run_id = r.run_id
WHERE {_VISIBLE_RUN}
ORDER BY e.key
"""


@dataclass(frozen=True, slots=True)
class ItemsRead:
    """A read of a stream: its run's liveness, whether it is closed, and the items found (in offset order)."""

    run_live: bool
    closed: bool
    items: list[StreamItem]


def read_items(
    session: psycopg.Connection[Any], run_id: str, key: str, after: int, tenant_id: str | None, limit: int
) -> ItemsRead | None:
    """Up to ``limit`` items after offset ``after``, as committed; None when no such run is visible."""
    rows = session.execute(
        READ_ITEMS, {"run_id": run_id, "key": key, "after": after, "tenant_id": tenant_id, "limit": limit}
    ).fetchall()
    if not rows:
        return None
    status, closed = rows[0][0], rows[0][1]
    items = [
        StreamItem(offset=offset, value=from_json(value), attempt=attempt, written_at=written_at)
        for _, _, offset, value, attempt, written_at in rows
        if offset is not None
    ]
    return ItemsRead(status in LIVE_STATUSES, bool(closed), items)


@dataclass(frozen=True, slots=True)
class EventRead:
    run_live: bool
    # (value,) when the event has one, else None.
    value: tuple[Any] | None


def read_event(session: psycopg.Connection[Any], run_id: str, key: str, tenant_id: str | None) -> EventRead | None:
    """An event of a run, as committed; None when no such run is visible."""
    row = session.execute(READ_EVENT, {"run_id": run_id, "key": key, "tenant_id": tenant_id}).fetchone()
    if row is None:
        return None
    status, exists, value = row
    return EventRead(status in LIVE_STATUSES, (from_json(value),) if exists else None)


def list_events(session: psycopg.Connection[Any], run_id: str, tenant_id: str | None) -> dict[str, Any] | None:
    """Every event of a run by key, as committed; None when no such run is visible."""
    rows = session.execute(LIST_EVENTS, {"run_id": run_id, "tenant_id": tenant_id}).fetchall()
    if not rows:
        return None
    return {key: from_json(value) for key, value in rows if key is not None}
