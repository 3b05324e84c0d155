"""Statements of the reconciler: find runs in states that must not exist, and repair each under its locks.

Every scan reads a bounded chunk through an index (waiting runs by id,
children by parent and id, expired leases by expiry) and remembers where it
stopped, so a pass costs the same on ten runs or ten million. A repair locks
what it changes (a parent before its child), checks again in a statement of
its own that the state still holds, and only then changes it.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..flow_control import QUEUE_CONCURRENCY_PREFIX
from ..journal_ids import WaitingFor
from . import flow, limit_states
from .db import WAKE_CHANNEL, cursor
from .forks import lineage
from .kin import CHILDREN_WAIT_OVER
from .landing import LOCK_RUN
from .leases import LIVE_RENEWAL

_TERMINAL = "('succeeded', 'failed', 'cancelled')"
# Its holder renewed its lease beside the row while a client transaction had the row locked: not expired.
_LEASE_RENEWED = LIVE_RENEWAL.format(run="durable_run")
_LIVE = "('pending', 'running', 'waiting')"
_CHILD_ID = f"substr(w.waiting_for, {len(WaitingFor.CHILD_PREFIX) + 1})"
_CHILDREN_WAIT = "w.waiting_for IN (" + ", ".join(f"'{wait}'" for wait in WaitingFor.children_waits()) + ")"

# One worker reconciles at a time; a transaction-level lock, so it also holds behind a transaction pooler.
TRY_LOCK = "SELECT pg_try_advisory_xact_lock(hashtext('durable_django.reconcile'))"

# A waiting run with what could wake it: a deadline, its awaited child's end, a stored signal, the end of
# its children wait (the last awaited child landed, or the first) and whether an awaited child still lives.
_WAITING_FACTS = f"""
SELECT w.run_id, w.waiting_for, w.available_at IS NOT NULL,
       (SELECT c.status IN {_TERMINAL} FROM durable_run c
        WHERE c.run_id = {_CHILD_ID} AND c.parent_run_id IN {lineage("w.run_id")}),
       EXISTS (SELECT 1 FROM durable_signal s
               WHERE s.run_id = w.run_id AND w.waiting_for = 'signal:' || s.signal || ':' || s.occurrence),
       CASE WHEN {_CHILDREN_WAIT} THEN {CHILDREN_WAIT_OVER} END,
       CASE WHEN {_CHILDREN_WAIT} THEN EXISTS (
           SELECT 1 FROM durable_run c
           WHERE c.parent_run_id = w.run_id AND c.awaited_token = w.attempts AND c.status IN {_LIVE}) END
FROM durable_run w
"""

# Waiting runs after a keyset position.
WAITING_CHUNK = (
    _WAITING_FACTS
    + """
WHERE w.status = 'waiting' AND w.run_id > %(after)s
ORDER BY w.run_id
LIMIT %(limit)s
"""
)

# One waiting run, read again once its lock is held.
WAITING_ONE = _WAITING_FACTS + "WHERE w.status = 'waiting' AND w.run_id = %(run_id)s"

# Children after a keyset position whose parent has finished while they are still live and
# not past a pivot (a running one asked to stop already counts as handled).
ORPHANS_CHUNK = f"""
WITH chunk AS (
    SELECT run_id, parent_run_id, status, pivoted_at, cancel_requested_at FROM durable_run
    WHERE parent_run_id IS NOT NULL AND (parent_run_id, run_id) > (%(after_parent)s, %(after_run)s)
    ORDER BY parent_run_id, run_id
    LIMIT %(limit)s
)
SELECT chunk.run_id, chunk.parent_run_id,
       chunk.status IN {_LIVE} AND chunk.pivoted_at IS NULL
       AND NOT (chunk.status = 'running' AND chunk.cancel_requested_at IS NOT NULL)
       AND p.status IN {_TERMINAL}
FROM chunk LEFT JOIN durable_run p ON p.run_id = chunk.parent_run_id
ORDER BY chunk.parent_run_id, chunk.run_id
"""

# Runs still running long after their lease expired that no reclaim may run again.
EXPIRED = f"""
SELECT run_id, attempts, parent_run_id, recoveries FROM durable_run
WHERE status = 'running' AND leased_until < now() - make_interval(secs => %(grace)s::float8)
  AND recoveries >= %(max_recoveries)s AND NOT {_LEASE_RENEWED}
ORDER BY leased_until
LIMIT %(limit)s
"""

# Wake a waiting run (locked by this transaction) that nothing else can wake.
WAKE = f"""
WITH woken AS (
    UPDATE durable_run SET status = 'pending', waiting_for = NULL, available_at = NULL, awaiting_children = NULL,
        updated_at = now()
    WHERE run_id = %(run_id)s AND status = 'waiting' AND waiting_for IS NOT DISTINCT FROM %(waiting_for)s
    RETURNING queue
)
SELECT pg_notify('{WAKE_CHANNEL}', queue) FROM woken
"""

SELECT_STATUS = "SELECT status FROM durable_run WHERE run_id = %s"

# The limit keys that hold runs back, after a keyset position (a skip scan of the held index), each with
# its first held run's concurrency limit and whether that run has a time to be looked at again.
HELD_KEYS = """
WITH RECURSIVE reasons AS (
    (SELECT held_by FROM durable_run
     WHERE status = 'pending' AND held_by IS NOT NULL AND held_by > %(after)s ORDER BY held_by LIMIT 1)
    UNION ALL
    SELECT (SELECT r.held_by FROM durable_run r
            WHERE r.status = 'pending' AND r.held_by IS NOT NULL AND r.held_by > reasons.held_by
            ORDER BY r.held_by LIMIT 1)
    FROM reasons WHERE reasons.held_by IS NOT NULL
)
SELECT reasons.held_by, head.concurrency_limit, head.available_at IS NOT NULL
FROM reasons
CROSS JOIN LATERAL (
    SELECT concurrency_limit, available_at FROM durable_run
    WHERE status = 'pending' AND held_by = reasons.held_by
    ORDER BY priority DESC, created_at LIMIT 1
) head
WHERE reasons.held_by IS NOT NULL
LIMIT %(limit)s
"""

# Rate-limited starts that have left their windows, a bounded batch at a time.
DELETE_EXPIRED_STARTS = """
DELETE FROM durable_rate_start WHERE id IN (
    SELECT id FROM durable_rate_start WHERE expires_at < now() ORDER BY expires_at LIMIT %(limit)s)
"""

# -- the health check's question: is any run stranded? Each statement reads only the live runs of its kind
# -- through their partial indexes (never the finished ones that make up most of a table) and stops at the
# -- first few it finds, which the engine confirms like a pass would.

# Waiting runs nothing can wake: their child finished, their signal is stored, their children wait is over
# (or has no live child to wait for and no deadline), or they wait for nothing known (a sleep without a
# deadline, a kind nobody writes).
STRANDED_WAITS = (
    _WAITING_FACTS
    + f"""
WHERE w.status = 'waiting' AND (
    EXISTS (SELECT 1 FROM durable_run c
            WHERE c.run_id = {_CHILD_ID} AND c.parent_run_id = w.run_id AND c.status IN {_TERMINAL})
    OR EXISTS (SELECT 1 FROM durable_signal s
               WHERE s.run_id = w.run_id AND w.waiting_for = 'signal:' || s.signal || ':' || s.occurrence)
    OR ({_CHILDREN_WAIT} AND ({CHILDREN_WAIT_OVER} OR (w.available_at IS NULL AND NOT EXISTS (
        SELECT 1 FROM durable_run c
        WHERE c.parent_run_id = w.run_id AND c.awaited_token = w.attempts AND c.status IN {_LIVE}))))
    OR w.waiting_for IS NULL
    OR NOT (w.waiting_for = 'sleep' OR w.waiting_for LIKE 'signal:%%' OR w.waiting_for LIKE 'child:%%'
            OR {_CHILDREN_WAIT} OR w.waiting_for = '{WaitingFor.OPERATOR}')
    OR (w.available_at IS NULL AND (w.waiting_for = 'sleep' OR (w.waiting_for LIKE 'child:%%' AND NOT EXISTS (
        SELECT 1 FROM durable_run c WHERE c.run_id = {_CHILD_ID} AND c.parent_run_id = w.run_id))))
)
LIMIT %(limit)s
"""
)

# Live children (not past a pivot, not already asked to stop) of parents that have finished.
STRANDED_CHILDREN = f"""
SELECT c.run_id, c.parent_run_id FROM durable_run c JOIN durable_run p ON p.run_id = c.parent_run_id
WHERE c.parent_run_id IS NOT NULL AND c.status IN {_LIVE} AND c.pivoted_at IS NULL
  AND NOT (c.status = 'running' AND c.cancel_requested_at IS NOT NULL) AND p.status IN {_TERMINAL}
LIMIT %(limit)s
"""

# Runs still running long after their lease expired (a live worker would have reclaimed them).
LONG_EXPIRED = f"""
SELECT run_id FROM durable_run
WHERE status = 'running' AND leased_until < now() - make_interval(secs => %(grace)s::float8) AND NOT {_LEASE_RENEWED}
ORDER BY leased_until
LIMIT %(limit)s
"""


@dataclass(frozen=True, slots=True)
class WaitingRun:
    """A waiting run and what could wake it, as one scan saw it."""

    run_id: str
    waiting_for: str | None
    has_deadline: bool
    # Its awaited child has finished (None: it waits for no child of its own).
    child_finished: bool | None
    # The signal it waits for is stored.
    signal_stored: bool
    # Its children wait is over (None: it waits for no children).
    children_over: bool | None = None
    # A child it awaits is still live (None: it waits for no children).
    children_live: bool | None = None


def try_lock() -> bool:
    """Take the reconciler's lock for the caller's transaction, unless another worker holds it."""
    with cursor() as cur:
        cur.execute(TRY_LOCK)
        locked: bool = cur.fetchone()[0]
        return locked


def waiting_chunk(after: str, limit: int) -> list[WaitingRun]:
    with cursor() as cur:
        cur.execute(WAITING_CHUNK, {"after": after, "limit": limit})
        return [WaitingRun(*row) for row in cur.fetchall()]


def orphans_chunk(after: tuple[str, str], limit: int) -> tuple[list[tuple[str, str]], tuple[str, str] | None]:
    """(live children of finished parents in the chunk, the chunk's last (parent, run) or None at the end)."""
    with cursor() as cur:
        cur.execute(ORPHANS_CHUNK, {"after_parent": after[0], "after_run": after[1], "limit": limit})
        rows = cur.fetchall()
    orphans = [(run_id, parent_run_id) for run_id, parent_run_id, orphaned in rows if orphaned]
    return orphans, ((rows[-1][1], rows[-1][0]) if len(rows) == limit else None)


def expired(grace_seconds: float, max_recoveries: int, limit: int) -> list[tuple[str, int, str | None, int]]:
    """(run_id, token, parent_run_id, recoveries) of runs left running long past their lease."""
    with cursor() as cur:
        cur.execute(EXPIRED, {"grace": grace_seconds, "max_recoveries": max_recoveries, "limit": limit})
        rows: list[tuple[str, int, str | None, int]] = cur.fetchall()
        return rows


def lock_run(run_id: str) -> None:
    with cursor() as cur:
        cur.execute(LOCK_RUN, [run_id])


def waiting_run(run_id: str) -> WaitingRun | None:
    """One waiting run as the scan reads it, for a check after its lock (None if it no longer waits)."""
    with cursor() as cur:
        cur.execute(WAITING_ONE, {"run_id": run_id})
        row = cur.fetchone()
    return WaitingRun(*row) if row else None


def wake(run_id: str, waiting_for: str | None) -> bool:
    with cursor() as cur:
        cur.execute(WAKE, {"run_id": run_id, "waiting_for": waiting_for})
        woken: bool = cur.rowcount > 0
        return woken


def held_keys(after: str, limit: int) -> list[tuple[str, int | None, bool]]:
    """(limit key, its first held run's concurrency limit, whether that run has a recheck time), in key order."""
    with cursor() as cur:
        cur.execute(HELD_KEYS, {"after": after, "limit": limit})
        return [(key, concurrency_limit, rechecked) for key, concurrency_limit, rechecked in cur.fetchall()]


def release_if_room(key: str, *, limit: int | None) -> int:
    """Release as many runs ``key`` holds as its limit has room for now (all when it has no limit any more).

    A slot is taken by a run under the key, and also by a due run of the key that nothing holds: a freed
    slot released it, or it is new, and the first claim that reaches it decides under the key's lock (a
    backlog of older runs can keep every worker busy for seconds before one does). The counts are read
    before the release takes the key's lock: a release too many only makes a run claimable, and its
    claim's admission decides again under the lock.

    Returns:
        How many runs were released.
    """
    if limit is None:
        room = HELD_ALL
    else:
        room = limit - limit_states.key_state(key).running
        if room > 0:
            room -= _due_unheld(key, cap=room)
    if room <= 0:
        return 0
    with cursor() as cur:
        return flow.release_held(cur, {key: room})


def _due_unheld(key: str, *, cap: int) -> int:
    """How many due runs ``key`` applies to that nothing holds (at most ``cap``)."""
    if key.startswith(QUEUE_CONCURRENCY_PREFIX):
        query, subject = _DUE_UNHELD_IN_QUEUE, key[len(QUEUE_CONCURRENCY_PREFIX) :]
    else:
        query, subject = _DUE_UNHELD_OF_FUNCTION_KEY, key
    with cursor() as cur:
        cur.execute(query, {"key": subject, "cap": cap})
        due: int = cur.fetchone()[0]
    return due


# Release every run a key holds when the key has no limit any more: more than any one key holds.
HELD_ALL = 1_000_000

# Due runs a concurrency key applies to that nothing holds, up to ``cap``: the next claim that reaches them
# admits them into its free slots. {applies}: the function key's runs (its due-runs index), or the queue's.
_DUE_UNHELD = """
SELECT count(*) FROM (
    SELECT 1 FROM durable_run
    WHERE status = 'pending' AND held_by IS NULL AND (available_at IS NULL OR available_at <= now()) AND {applies}
    LIMIT %(cap)s
) due
"""
_DUE_UNHELD_OF_FUNCTION_KEY = _DUE_UNHELD.format(applies="concurrency_key = %(key)s")
_DUE_UNHELD_IN_QUEUE = _DUE_UNHELD.format(applies="queue = %(key)s")


def delete_expired_starts(limit: int) -> int:
    with cursor() as cur:
        cur.execute(DELETE_EXPIRED_STARTS, {"limit": limit})
        deleted: int = cur.rowcount
    return deleted


def status_of(run_id: str) -> str | None:
    with cursor() as cur:
        cur.execute(SELECT_STATUS, [run_id])
        row = cur.fetchone()
    return row[0] if row else None


def stranded_waits(limit: int) -> list[WaitingRun]:
    """Waiting runs that nothing seems able to wake (at most ``limit``), to be confirmed by the engine."""
    with cursor() as cur:
        cur.execute(STRANDED_WAITS, {"limit": limit})
        return [WaitingRun(*row) for row in cur.fetchall()]


def stranded_children(limit: int) -> list[tuple[str, str]]:
    """(run_id, parent_run_id) of live children of finished parents, at most ``limit``."""
    with cursor() as cur:
        cur.execute(STRANDED_CHILDREN, {"limit": limit})
        rows: list[tuple[str, str]] = cur.fetchall()
        return rows


def long_expired(grace_seconds: float, limit: int) -> list[str]:
    """Runs still running ``grace_seconds`` after their lease expired, at most ``limit``."""
    with cursor() as cur:
        cur.execute(LONG_EXPIRED, {"grace": grace_seconds, "limit": limit})
        return [run_id for (run_id,) in cur.fetchall()]
