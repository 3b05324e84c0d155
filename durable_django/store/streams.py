"""Statements on a run's events and streams: fenced writes that wake readers (their reads: ``stream_reads``).

A write is fenced on the claim token like every write of an attempt, and sends
a NOTIFY on ``durable_stream`` (payload: the run id) in its transaction, so a
reader hears of it at commit. A stream's offsets come from its ``durable_stream``
row, which each write locks until it commits: offsets are given in commit
order, so a reader that has read up to offset n never sees a smaller one appear.

A write from the handler's body carries its position among the body's writes
of that key (``body``); it is stored only while the row counts exactly that many
body writes, so a replay, or a write sent again after a lost answer, writes
nothing twice. A write from inside a step carries none and is always stored.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..exceptions import LeaseLost
from .db import STREAM_CHANNEL, cursor, fetch_one

_FENCE = """
fence AS (
    SELECT run_id, attempts, tenant_id, cancel_requested_at IS NOT NULL AND pivoted_at IS NULL AS cancel
    FROM durable_run
    WHERE run_id = %(run_id)s AND attempts = %(token)s AND status = 'running'
    FOR SHARE
)"""

# Append an item under the fence at the stream's next offset (not to a closed stream; a body write only at
# its position); the item's offset, or none when nothing was stored.
WRITE_ITEM = f"""
WITH {_FENCE}, head AS (
    INSERT INTO durable_stream AS s (run_id, key, next_offset, body_writes, tenant_id, created_at)
    SELECT run_id, %(key)s, 1, CASE WHEN %(body)s::int IS NULL THEN 0 ELSE 1 END, tenant_id, now() FROM fence
    ON CONFLICT (run_id, key) DO UPDATE
    SET next_offset = s.next_offset + 1,
        body_writes = s.body_writes + CASE WHEN %(body)s::int IS NULL THEN 0 ELSE 1 END
    WHERE s.closed_at IS NULL AND (%(body)s::int IS NULL OR s.body_writes = %(body)s::int)
    RETURNING s.next_offset - 1 AS item_offset
), item AS (
    INSERT INTO durable_stream_item (run_id, key, item_offset, value, attempt, written_at, tenant_id)
    SELECT fence.run_id, %(key)s, head.item_offset, %(value)s::jsonb, fence.attempts, now(), fence.tenant_id
    FROM fence, head
    RETURNING item_offset, pg_notify('{STREAM_CHANNEL}', run_id)
)
SELECT (SELECT cancel FROM fence), (SELECT item_offset FROM item)
"""

# Publish an event's value under the fence (the latest wins; a body write only at its position).
SET_EVENT = f"""
WITH {_FENCE}, up AS (
    INSERT INTO durable_event AS e (run_id, key, value, attempt, body_writes, tenant_id, updated_at)
    SELECT run_id, %(key)s, %(value)s::jsonb, attempts,
           CASE WHEN %(body)s::int IS NULL THEN 0 ELSE %(body)s::int + 1 END, tenant_id, now()
    FROM fence
    ON CONFLICT (run_id, key) DO UPDATE
    SET value = excluded.value, attempt = excluded.attempt, updated_at = excluded.updated_at,
        body_writes = e.body_writes + CASE WHEN %(body)s::int IS NULL THEN 0 ELSE 1 END
    WHERE %(body)s::int IS NULL OR e.body_writes = %(body)s::int
    RETURNING pg_notify('{STREAM_CHANNEL}', e.run_id)
)
SELECT (SELECT cancel FROM fence), (SELECT count(*) FROM up)
"""

# Close a stream under the fence (once; closing a closed stream changes nothing and wakes nobody).
CLOSE_STREAM = f"""
WITH {_FENCE}, head AS (
    INSERT INTO durable_stream AS s (run_id, key, closed_at, tenant_id, created_at)
    SELECT run_id, %(key)s, now(), tenant_id, now() FROM fence
    ON CONFLICT (run_id, key) DO UPDATE SET closed_at = now() WHERE s.closed_at IS NULL
    RETURNING pg_notify('{STREAM_CHANNEL}', s.run_id)
)
SELECT (SELECT cancel FROM fence), (SELECT count(*) FROM head)
"""

# How many body writes a stream and an event of this key have committed.
BODY_WRITES = """
SELECT (SELECT body_writes FROM durable_stream WHERE run_id = %(run_id)s AND key = %(key)s),
       (SELECT body_writes FROM durable_event WHERE run_id = %(run_id)s AND key = %(key)s)
"""

@dataclass(frozen=True, slots=True)
class Written:
    """What a fenced write did."""

    # It stored something (False: a body write that was stored before, or a write to a closed stream).
    stored: bool
    # A cancel was requested (and no pivot step was journalled).
    cancel_requested: bool
    # The item's offset, for a stream write that was stored.
    offset: int | None = None


# write_item() and set_event(): (run_id, token, key, value_json, body) -> Written.
Write = Callable[[str, int, str, str, "int | None"], Written]


@dataclass(frozen=True, slots=True)
class BodyWrites:
    """How many of the body's writes of a key are committed, to its stream and to its event."""

    stream: int
    event: int


def _fenced(sql: str, params: dict[str, Any]) -> tuple[Any, ...]:
    """One fenced write, on the store cursor a step's write uses too (``fetch_one``): a handler that streams
    tokens sends one such statement per token."""
    row = fetch_one(sql, params)
    if row is None or row[0] is None:
        raise LeaseLost()
    return tuple(row)


def write_item(run_id: str, token: int, key: str, value_json: str, body: int | None) -> Written:
    """Append an item to a held run's stream (``body``: the write's position among the body's writes of it).

    Raises:
        LeaseLost: the run is no longer this holder's; nothing was written.
    """
    cancel, offset = _fenced(
        WRITE_ITEM, {"run_id": run_id, "token": token, "key": key, "value": value_json, "body": body}
    )
    return Written(offset is not None, bool(cancel), offset)


def set_event(run_id: str, token: int, key: str, value_json: str, body: int | None) -> Written:
    """Publish an event of a held run (``body`` as for ``write_item``).

    Raises:
        LeaseLost: the run is no longer this holder's; nothing was written.
    """
    cancel, stored = _fenced(
        SET_EVENT, {"run_id": run_id, "token": token, "key": key, "value": value_json, "body": body}
    )
    return Written(bool(stored), bool(cancel))


def close_stream(run_id: str, token: int, key: str) -> Written:
    """Close a held run's stream (whether it was written or not).

    Raises:
        LeaseLost: the run is no longer this holder's; nothing was written.
    """
    cancel, closed = _fenced(CLOSE_STREAM, {"run_id": run_id, "token": token, "key": key})
    return Written(bool(closed), bool(cancel))


def body_writes(run_id: str, key: str) -> BodyWrites:
    """How many body writes of ``key`` the run has committed (to its stream and its event)."""
    with cursor() as cur:
        cur.execute(BODY_WRITES, {"run_id": run_id, "key": key})
        stream, event = cur.fetchone()
    return BodyWrites(stream or 0, event or 0)
