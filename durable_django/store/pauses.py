"""Pauses of a function or a queue: recorded, listed, ended, and the runs they hold.

A pause is a row of ``durable_pause`` keyed as ``Run.held_by`` shows it
("paused:function:{name}", "paused:queue:{queue}"). Pausing holds the due runs
already waiting (one statement, at the operator's call); the claim statement
holds any other it meets (``durable_hold_paused``, migration 0018), so each
paused run is read once and is then out of the claim index. Pause, unpause and
that hold take the pause key's transaction-level advisory lock, and the hold
looks for the pause again after it: a run is never left held by a pause that
has ended.
"""

from __future__ import annotations

from ..types import Pause
from .db import WAKE_CHANNEL, cursor, in_transaction

# Serialises everything that decides on one pause key (the same lock space as the limit keys' locks).
LOCK_KEY = "SELECT pg_advisory_xact_lock(hashtextextended(%(key)s, 0))"

_PAUSE_COLUMNS = "function, queue, reason, created_at"

# Record a pause; pausing again what is paused keeps its start and takes the new reason.
INSERT_PAUSE = f"""
INSERT INTO durable_pause (key, function, queue, reason) VALUES (%(key)s, %(function)s, %(queue)s, %(reason)s)
ON CONFLICT (key) DO UPDATE SET reason = EXCLUDED.reason
RETURNING {_PAUSE_COLUMNS}
"""

# Hold the due pending runs of a paused function that no limit holds (through the pending runs' index on name).
HOLD_FUNCTION_BACKLOG = """
UPDATE durable_run SET held_by = %(key)s, available_at = NULL
WHERE run_id IN (
    SELECT run_id FROM durable_run
    WHERE name = %(function)s AND status = 'pending' AND held_by IS NULL
      AND (available_at IS NULL OR available_at <= now())
    FOR UPDATE SKIP LOCKED)
"""

# The same for a paused queue (through the queue claim index).
HOLD_QUEUE_BACKLOG = """
UPDATE durable_run SET held_by = %(key)s, available_at = NULL
WHERE run_id IN (
    SELECT run_id FROM durable_run
    WHERE queue = %(queue)s AND status = 'pending' AND held_by IS NULL
      AND (available_at IS NULL OR available_at <= now())
    FOR UPDATE SKIP LOCKED)
"""

DELETE_PAUSE = "DELETE FROM durable_pause WHERE key = %(key)s"

# Give the runs a pause held back to the claim index (they start in claim order), and wake their workers.
RELEASE_PAUSED = f"""
WITH released AS (
    UPDATE durable_run SET held_by = NULL WHERE status = 'pending' AND held_by = %(key)s
    RETURNING queue
), woken AS (
    SELECT pg_notify('{WAKE_CHANNEL}', q.queue) FROM (SELECT DISTINCT queue FROM released) q
)
SELECT (SELECT count(*) FROM released), (SELECT count(*) FROM woken)
"""

LIST_PAUSES = f"SELECT {_PAUSE_COLUMNS} FROM durable_pause ORDER BY created_at, key"

PAUSE_EXISTS = "SELECT EXISTS (SELECT FROM durable_pause WHERE key = %(key)s)"


def pause(key: str, *, function: str | None, queue: str | None, reason: str) -> tuple[Pause, int]:
    """Record the pause and hold the due runs it covers.

    Returns:
        The pause, and how many runs it held now.
    """

    def work() -> tuple[Pause, int]:
        with cursor() as cur:
            cur.execute(LOCK_KEY, {"key": key})
            cur.execute(INSERT_PAUSE, {"key": key, "function": function, "queue": queue, "reason": reason})
            recorded = Pause(*cur.fetchone())
            if function is not None:
                cur.execute(HOLD_FUNCTION_BACKLOG, {"key": key, "function": function})
            else:
                cur.execute(HOLD_QUEUE_BACKLOG, {"key": key, "queue": queue})
            return recorded, cur.rowcount

    return in_transaction(work)


def unpause(key: str) -> tuple[bool, int]:
    """End the pause and release the runs it holds.

    Returns:
        Whether there was such a pause, and how many runs were released.
    """

    def work() -> tuple[bool, int]:
        with cursor() as cur:
            cur.execute(LOCK_KEY, {"key": key})
            cur.execute(DELETE_PAUSE, {"key": key})
            existed = cur.rowcount > 0
            cur.execute(RELEASE_PAUSED, {"key": key})
            released: int = cur.fetchone()[0]
        return existed, released

    return in_transaction(work)


def list_pauses(using: str | None = None) -> list[Pause]:
    with cursor(using) as cur:
        cur.execute(LIST_PAUSES)
        return [Pause(*row) for row in cur.fetchall()]


def exists(key: str) -> bool:
    with cursor() as cur:
        cur.execute(PAUSE_EXISTS, {"key": key})
        found: bool = cur.fetchone()[0]
        return found
