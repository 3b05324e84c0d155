"""A bulk operation's batch, set-based: cancel or resume hundreds of runs in a few statements, by the rules
of ``cancel()`` and ``resume()`` run by run.

Both run in the caller's transaction. First one statement locks every row the batch will touch, in the
order every transaction here takes them (a parent before its child): by depth from the tree's root, then
by run id, so two batches over overlapping runs, or a batch and a landing, never wait for each other in a
cycle. What follows is decided after the locks, in statements of their own (``landing`` says why).

A cancel acts level by level, deepest first: each run's outcome is decided from its row as the runs
below it left it, as the one-by-one loop newest first (children are always newer than their parents)
left it, and a landing wakes its parent before the parent is decided.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime

from django.db.backends.utils import CursorWrapper

from ..states import RunStatus
from . import flow
from .db import DONE_CHANNEL, WAKE_CHANNEL, cursor
from .kin import LIVE, cascade, wake_parent
from .runs import encode_cursor

_TERMINAL = "('succeeded', 'failed', 'cancelled')"

# The runs a bulk operation's filter matches, as list_runs() filters them: newest first, keyset after
# (created_at, run_id); only what a batch decides on is read (a whole run costs more to decode than to act on).
_MATCHING = """(%(status)s::text IS NULL OR status = %(status)s)
  AND (NOT %(parked)s::boolean OR parked_at IS NOT NULL)
  AND (%(name)s::text IS NULL OR name = %(name)s)
  AND (%(tenant_id)s::uuid IS NULL OR tenant_id = %(tenant_id)s::uuid)
  AND (%(after_created)s::timestamptz IS NULL OR (created_at, run_id) < (%(after_created)s, %(after_run)s))
ORDER BY created_at DESC, run_id DESC
LIMIT %(limit)s"""
LIST_MATCHING = f"SELECT run_id, name, status, parked_at, created_at FROM durable_run WHERE {_MATCHING}"
# The same, of the runs whose input contains a JSON document (through the input's GIN index).
LIST_MATCHING_BY_INPUT = (
    "SELECT run_id, name, status, parked_at, created_at FROM durable_run "
    f"WHERE input @> %(input_contains)s::jsonb AND {_MATCHING}"
)

# Lock a batch's runs, their parents and (with_descendants) their live descendants, by depth from the root,
# then run id; returns each run locked, its depth and whether it is one of the batch.
LOCK_BATCH = f"""
WITH RECURSIVE up AS (
    SELECT run_id AS member, parent_run_id AS above, 0 AS height
    FROM durable_run WHERE run_id = ANY(%(run_ids)s::text[])
    UNION ALL
    -- A probe of the primary key per run (a join would hash the whole table).
    SELECT up.member, (SELECT r.parent_run_id FROM durable_run r WHERE r.run_id = up.above), up.height + 1
    FROM up WHERE up.above IS NOT NULL
), members AS (
    SELECT member AS run_id, max(height) AS depth FROM up GROUP BY member
), down AS (
    SELECT c.run_id, m.depth + 1 AS depth
    FROM members m JOIN durable_run p ON p.run_id = m.run_id AND p.has_children
    JOIN durable_run c ON c.parent_run_id = m.run_id
    WHERE %(with_descendants)s::boolean
    UNION ALL
    SELECT c.run_id, down.depth + 1 FROM down JOIN durable_run c ON c.parent_run_id = down.run_id
), touched AS (
    SELECT run_id, depth, 'member' AS kind FROM members
    UNION ALL
    SELECT r.parent_run_id, m.depth - 1, 'parent'
    FROM members m JOIN durable_run r USING (run_id) WHERE r.parent_run_id IS NOT NULL
    UNION ALL
    SELECT run_id, depth, 'descendant' FROM down
)
SELECT d.run_id, t.depth, t.kind = 'member' FROM durable_run d JOIN touched t USING (run_id)
WHERE t.kind <> 'descendant' OR d.status IN {LIVE}
ORDER BY t.depth, d.run_id
FOR UPDATE OF d
"""

# Cancel some locked runs of one depth, each by the rule of cancel(): a finished or pivoted run is refused
# (the first refusal noted), an executing one asked to stop, any other ended now. Returns each run's
# outcome, its status before and after, and what its parent, its cascade and its limit slots need.
CANCEL_LEVEL = f"""
WITH decided AS (
    SELECT run_id, status AS before,
           CASE WHEN status IN {_TERMINAL} OR pivoted_at IS NOT NULL THEN 'refused'
                WHEN status = 'running' AND attempt_started_at IS NOT NULL THEN 'requested'
                ELSE 'cancelled' END AS outcome
    FROM durable_run WHERE run_id = ANY(%(run_ids)s::text[])
), changed AS (
    UPDATE durable_run r SET
        status = CASE WHEN d.outcome = 'cancelled' THEN 'cancelled' ELSE r.status END,
        cancel_requested_at = CASE WHEN d.outcome = 'refused' THEN r.cancel_requested_at
                                   ELSE coalesce(r.cancel_requested_at, now()) END,
        cancel_refused_at = CASE WHEN d.outcome = 'refused' THEN coalesce(r.cancel_refused_at, now())
                                 ELSE r.cancel_refused_at END,
        finished_at = CASE WHEN d.outcome = 'cancelled' THEN now() ELSE r.finished_at END,
        waiting_for = CASE WHEN d.outcome = 'cancelled' THEN NULL ELSE r.waiting_for END,
        available_at = CASE WHEN d.outcome = 'cancelled' THEN NULL ELSE r.available_at END,
        leased_until = CASE WHEN d.outcome = 'cancelled' THEN NULL ELSE r.leased_until END,
        held_by = CASE WHEN d.outcome = 'cancelled' THEN NULL ELSE r.held_by END,
        updated_at = CASE WHEN d.outcome = 'refused' THEN r.updated_at ELSE now() END
    FROM decided d
    WHERE r.run_id = d.run_id AND r.run_id = ANY(%(run_ids)s::text[])
    RETURNING r.run_id, d.outcome, r.parent_run_id, r.has_children, r.concurrency_key, r.concurrency_while_waiting,
              r.started_at IS NOT NULL, r.queue, d.before, r.status
)
SELECT *, CASE WHEN outcome = 'cancelled' THEN pg_notify('{DONE_CHANNEL}', run_id) END FROM changed
ORDER BY run_id
"""

# Resume some locked runs by the rule of resume(): a failed, cancelled or parked run whose parent (if any) is
# live goes back to pending with its journal and a fresh budget. A run never claimed whose coalesce key an
# unclaimed pending run holds stays as it is, and of several such runs of one key only the newest (the
# first the one-by-one loop reaches) is resumed. Returns the run ids resumed; workers are woken per queue.
RESUME_BATCH = f"""
WITH candidates AS (
    SELECT r.run_id, r.coalesce_key, r.created_at,
           (r.status IN ('failed', 'cancelled') OR (r.status = 'waiting' AND r.parked_at IS NOT NULL))
           AND (r.parent_run_id IS NULL OR coalesce(
               (SELECT p.status NOT IN {_TERMINAL} FROM durable_run p WHERE p.run_id = r.parent_run_id), false))
           AS resumable,
           r.attempts = 0 AND r.coalesce_key IS NOT NULL AS coalesces
    FROM durable_run r WHERE r.run_id = ANY(%(run_ids)s::text[])
), ranked AS (
    SELECT run_id, resumable, coalesces, coalesce_key,
           row_number() OVER (PARTITION BY resumable AND coalesces, coalesce_key
                              ORDER BY created_at DESC, run_id DESC) AS rank
    FROM candidates
), chosen AS (
    SELECT run_id FROM ranked c
    WHERE c.resumable AND (NOT c.coalesces OR (c.rank = 1 AND NOT coalesce((
        SELECT true FROM durable_run o
        WHERE o.coalesce_key = c.coalesce_key AND o.status = 'pending' AND o.attempts = 0 LIMIT 1), false)))
), resumed AS (
    UPDATE durable_run r SET status = 'pending', failures = 0, recoveries = 0, available_at = NULL,
        leased_until = NULL, finished_at = NULL, waiting_for = NULL, error = NULL, error_type = NULL, deadline = NULL,
        parked_at = NULL,
        started_at = CASE WHEN r.concurrency_while_waiting AND r.status <> 'waiting' THEN NULL ELSE r.started_at END,
        cancel_requested_at = NULL, cancel_refused_at = NULL, updated_at = now()
    FROM chosen c
    WHERE r.run_id = c.run_id AND r.run_id = ANY(%(run_ids)s::text[])
    RETURNING r.run_id, r.queue
), woken AS (
    SELECT pg_notify('{WAKE_CHANNEL}', queue) FROM (SELECT DISTINCT queue FROM resumed) q
)
SELECT run_id, (SELECT count(*) FROM woken) FROM resumed
"""


@dataclass(frozen=True, slots=True)
class Listed:
    """A run as a bulk operation's page lists it."""

    run_id: str
    name: str
    status: RunStatus
    # Set while the run waits for an operator (parked): a resume acts on it, as on a failed run.
    parked_at: datetime | None


def list_matching(
    *,
    status: str | None,
    name: str | None,
    tenant_id: str | None,
    input_contains: str | None,
    parked: bool,
    limit: int,
    after: tuple[datetime, str] | None,
) -> tuple[list[Listed], str | None]:
    """A page of the runs a filter matches, newest first, and the cursor of the next page (None: the last).

    ``parked``: only runs parked for an operator (all of them are waiting: the status index serves them).
    """
    after_created, after_run = after or (None, None)
    params = {
        "status": RunStatus.WAITING if parked and status is None else status,
        "parked": parked,
        "name": name,
        "tenant_id": tenant_id,
        "input_contains": input_contains,
        "limit": limit + 1,
        "after_created": after_created,
        "after_run": after_run,
    }
    with cursor() as cur:
        cur.execute(LIST_MATCHING if input_contains is None else LIST_MATCHING_BY_INPUT, params)
        rows = cur.fetchall()
    more = len(rows) > limit
    rows = rows[:limit]
    listed = [Listed(run_id, name, RunStatus(status), parked_at) for run_id, name, status, parked_at, _ in rows]
    return listed, encode_cursor(rows[-1][4], rows[-1][0]) if more else None


def lock_batch(cur: CursorWrapper, run_ids: list[str], *, with_descendants: bool) -> dict[int, list[str]]:
    """Lock the batch's rows (see ``LOCK_BATCH``); returns the batch's runs found, by depth."""
    cur.execute(LOCK_BATCH, {"run_ids": run_ids, "with_descendants": with_descendants})
    levels: dict[int, set[str]] = defaultdict(set)
    for run_id, depth, member in cur.fetchall():
        if member:
            levels[depth].add(run_id)
    return {depth: sorted(members) for depth, members in levels.items()}


def cancel_batch(run_ids: list[str]) -> dict[str, str]:
    """Cancel each run as ``cancel()`` would, with its descendants, in the caller's transaction.

    Returns:
        {run_id: 'cancelled' | 'requested' | 'refused'} for each run found; a run not found is left out.
    """
    outcomes: dict[str, str] = {}
    with cursor() as cur:
        levels = lock_batch(cur, sorted(set(run_ids)), with_descendants=True)
        for depth in sorted(levels, reverse=True):
            outcomes.update(_cancel_level(cur, levels[depth]))
    return outcomes


def _cancel_level(cur: CursorWrapper, run_ids: list[str]) -> dict[str, str]:
    """One depth's runs, as ``land()`` lands a cancel: the runs, their parents woken, the cascade, the slots."""
    cur.execute(CANCEL_LEVEL, {"run_ids": run_ids})
    rows = cur.fetchall()
    ended_by_parent: dict[str, list[str]] = defaultdict(list)
    cascade_from: list[str] = []
    changes: list[flow.SlotChange] = []
    for run_id, outcome, parent_run_id, has_children, key, while_waiting, started, queue, before, after, _ in rows:
        if outcome == "refused":
            continue
        changes.append(flow.SlotChange(key, while_waiting, started, queue, before, after))
        if outcome == "cancelled" and parent_run_id is not None:
            ended_by_parent[parent_run_id].append(run_id)
        if has_children:
            cascade_from.append(run_id)
    for parent_run_id in sorted(ended_by_parent):
        wake_parent(cur, parent_run_id, ended_by_parent[parent_run_id])
    if cascade_from:
        changes += cascade(cur, cascade_from)
    flow.release_slots(cur, changes)
    return {row[0]: row[1] for row in rows}


def resume_batch(run_ids: list[str]) -> tuple[set[str], set[str]]:
    """Resume each run as ``resume()`` would (on its own version), in the caller's transaction.

    Returns:
        The run ids found, and those of them resumed; the others found were refused (not resumable, a
        finished parent, a coalesce key taken).
    """
    batch = sorted(set(run_ids))
    with cursor() as cur:
        levels = lock_batch(cur, batch, with_descendants=False)
        cur.execute(RESUME_BATCH, {"run_ids": batch})
        resumed = {row[0] for row in cur.fetchall()}
    return {run_id for members in levels.values() for run_id in members}, resumed
