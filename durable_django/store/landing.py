"""Landing: the transactions that end runs, and what must follow in the same transaction.

A run that lands terminal wakes its parent if the parent waits for it, and its
unfinished descendants are cancelled by the rule of ``cancel()`` (pending,
waiting, or claimed but not started: cancelled; running: cancel requested;
past a pivot: refused). A pivoted waiting descendant whose awaited child the
cascade ends is woken. Listeners hear ``durable_done`` for every run that
landed terminal and workers ``durable_wake`` for every run made pending.

Lock order, everywhere two runs meet: the parent before the child, a tree from
the top down (by depth, then run id). And a statement's snapshot is older than
any lock it waited for, so no statement decides anything about a row it had to
wait for: rows are locked in one statement and what follows is decided in the
next. A run with neither parent nor children has nothing to lock or wake and
lands with one plain fenced UPDATE (the common case, kept cheap).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from django.db.backends.utils import CursorWrapper

from ..flow_control import QUEUE_CONCURRENCY_PREFIX, configured_queue_limits
from ..journal_ids import WaitingFor
from ..states import RunStatus
from . import flow
from .db import DONE_CHANNEL, WAKE_CHANNEL, cursor, in_transaction

_TERMINAL = "('succeeded', 'failed', 'cancelled')"
LIVE = "('pending', 'running', 'waiting')"
_CHILDREN_WAITS = "(" + ", ".join(f"'{wait}'" for wait in WaitingFor.children_waits()) + ")"
_ALL_CHILDREN = str(WaitingFor.children(wait_all=True))
_FENCE = "run_id = %(run_id)s AND attempts = %(token)s AND status = 'running'"

# Take a run's row lock (a parent's, before its child is touched).
LOCK_RUN = "SELECT 1 FROM durable_run WHERE run_id = %s FOR UPDATE"

# Land a batch of held runs that have no parent and no children succeeded: nothing to lock,
# wake or cascade. The slots of limits they held are released in the same statement: the
# release function takes the keys' locks after the rows' and counts with a fresh snapshot
# (store/flow.py), and is called only when a landed run held a slot. Runs with kin are refused here
# and land through COMPLETE.
COMPLETE_ALONE = f"""
WITH landed AS (
    UPDATE durable_run r SET status = 'succeeded', output = done.output::jsonb, leased_until = NULL,
        finished_at = now(), updated_at = now()
    FROM unnest(%(run_ids)s::text[], %(tokens)s::int[], %(outputs)s::text[]) AS done(run_id, token, output)
    WHERE r.run_id = done.run_id AND r.attempts = done.token AND r.status = 'running'
      AND r.parent_run_id IS NULL AND NOT r.has_children
    RETURNING r.run_id, r.concurrency_key, r.queue
), freed AS (
    SELECT key, count(*)::int AS n FROM (
        SELECT concurrency_key AS key FROM landed WHERE concurrency_key IS NOT NULL
        UNION ALL
        SELECT %(queue_prefix)s || queue FROM landed WHERE queue = ANY(%(concurrency_queues)s::text[])
    ) slots
    GROUP BY key
)
SELECT run_id, pg_notify('{DONE_CHANNEL}', run_id),
       (SELECT durable_release_held(array_agg(key), array_agg(n), '{WAKE_CHANNEL}') FROM freed HAVING count(*) > 0)
FROM landed
"""

# Of held runs the landing refused, those an earlier try already landed succeeded (its commit's
# answer was lost with the connection).
ALREADY_COMPLETED = """
SELECT r.run_id FROM durable_run r
JOIN unnest(%(run_ids)s::text[], %(tokens)s::int[]) AS held(run_id, token)
  ON r.run_id = held.run_id AND r.attempts = held.token
WHERE r.status = 'succeeded'
"""

# What each landing statement returns of the runs it landed: their new status, whether they have
# children, and what decides which limit slots they gave up (see flow.SlotChange).
_RETURNING = "run_id, status, has_children, concurrency_key, concurrency_while_waiting, started_at IS NOT NULL, queue"
LANDED = f"""
SELECT {_RETURNING}, CASE WHEN status IN {_TERMINAL} THEN pg_notify('{DONE_CHANNEL}', run_id) END
FROM landed
"""

# Land held runs succeeded with their outputs.
COMPLETE = f"""
WITH landed AS (
    UPDATE durable_run r SET status = 'succeeded', output = done.output::jsonb, leased_until = NULL,
        finished_at = now(), updated_at = now()
    FROM unnest(%(run_ids)s::text[], %(tokens)s::int[], %(outputs)s::text[]) AS done(run_id, token, output)
    WHERE r.run_id = done.run_id AND r.attempts = done.token AND r.status = 'running'
    RETURNING r.*
)
{LANDED}
"""

_FAIL_STATUS = """CASE
    WHEN cancel_requested_at IS NOT NULL AND pivoted_at IS NULL THEN 'cancelled'
    WHEN %(final)s AND %(park)s THEN 'waiting'
    WHEN %(final)s THEN 'failed'
    ELSE 'pending' END"""

# Record a failed attempt: retry after a delay, or land failed (cancelled if a cancel was requested), or,
# with park, wait for an operator (holding no worker, its error kept) instead of failing.
FAIL = f"""
WITH landed AS (
    UPDATE durable_run SET
        failures = failures + %(counts)s::int,
        status = {_FAIL_STATUS},
        available_at = CASE WHEN {_FAIL_STATUS} = 'pending'
                            THEN now() + make_interval(secs => %(delay)s::float8) END,
        finished_at = CASE WHEN {_FAIL_STATUS} IN ('pending', 'waiting') THEN NULL ELSE now() END,
        parked_at = CASE WHEN {_FAIL_STATUS} = 'waiting' THEN now() END,
        waiting_for = CASE WHEN {_FAIL_STATUS} = 'waiting' THEN '{WaitingFor.OPERATOR}' END,
        error = %(error)s, error_type = %(error_type)s, leased_until = NULL, updated_at = now()
    WHERE {_FENCE}
    RETURNING *
), retried AS (
    SELECT pg_notify('{WAKE_CHANNEL}', queue) FROM landed WHERE status = 'pending' AND %(delay)s::float8 <= 0
)
SELECT {_RETURNING}, CASE WHEN status IN {_TERMINAL} THEN pg_notify('{DONE_CHANNEL}', run_id) END,
       (SELECT count(*) FROM retried)
FROM landed
"""

# Land a held run cancelled: its cancel was requested and it reached a context call or heartbeat
# (only if a cancel is requested now, with requested_only).
CANCEL_HELD = f"""
WITH landed AS (
    UPDATE durable_run SET status = 'cancelled', leased_until = NULL, finished_at = now(), updated_at = now()
    WHERE {_FENCE} AND pivoted_at IS NULL AND (NOT %(requested_only)s OR cancel_requested_at IS NOT NULL)
    RETURNING *
)
{LANDED}
"""

# Count children that just landed toward the parent's wait (the parent is locked by this transaction),
# and wake it if it waits for one of them (wait_for_result), or if they were the last of the children
# it awaits (wait_for_all) or the first (wait_for_any): a children wait counts down how many landings
# it still needs, and a landing counts only for a child marked with the parent's current fence token,
# so each landing does the same small work however many children the parent has.
WAKE_PARENT = f"""
WITH decided AS (
    SELECT p.run_id, p.waiting_for = ANY(%(waits)s::text[]) AS awaited_child,
           CASE WHEN p.waiting_for IN {_CHILDREN_WAITS} THEN (
               SELECT count(*)::int FROM durable_run c
               WHERE c.run_id = ANY(%(children)s::text[]) AND c.awaited_token = p.attempts)
           ELSE 0 END AS counted
    FROM durable_run p WHERE p.run_id = %(parent_run_id)s AND p.status = 'waiting'
), changed AS (
    UPDATE durable_run p SET
        awaiting_children = CASE WHEN d.awaited_child THEN p.awaiting_children
                                 ELSE p.awaiting_children - d.counted END,
        status = CASE WHEN d.awaited_child OR p.awaiting_children - d.counted <= 0 THEN 'pending'
                      ELSE p.status END,
        waiting_for = CASE WHEN d.awaited_child OR p.awaiting_children - d.counted <= 0 THEN NULL
                           ELSE p.waiting_for END,
        available_at = CASE WHEN d.awaited_child OR p.awaiting_children - d.counted <= 0 THEN NULL
                            ELSE p.available_at END,
        updated_at = CASE WHEN d.awaited_child OR p.awaiting_children - d.counted <= 0 THEN now()
                          ELSE p.updated_at END
    FROM decided d
    WHERE p.run_id = d.run_id AND (d.awaited_child OR d.counted > 0)
    RETURNING p.status, p.queue
)
SELECT pg_notify('{WAKE_CHANNEL}', queue) FROM changed WHERE status = 'pending'
"""

# Whether a waiting run ``w``'s children wait is over: none of the children it awaits is live (all), or
# one of them has finished (any).
CHILDREN_WAIT_OVER = f"""(
    (w.waiting_for = '{_ALL_CHILDREN}' AND NOT EXISTS (
        SELECT 1 FROM durable_run c
        WHERE c.parent_run_id = w.run_id AND c.awaited_token = w.attempts AND c.status IN {LIVE}))
    OR (w.waiting_for <> '{_ALL_CHILDREN}' AND EXISTS (
        SELECT 1 FROM durable_run c
        WHERE c.parent_run_id = w.run_id AND c.awaited_token = w.attempts AND c.status IN {_TERMINAL})))"""

# Count again, from their children, the children waits of some runs (locked by this transaction) whose
# awaited children a cascade ended without counting them; wake those whose wait is over.
RECOUNT_CHILDREN_WAITS = f"""
WITH changed AS (
    UPDATE durable_run w SET
        status = CASE WHEN {CHILDREN_WAIT_OVER} THEN 'pending' ELSE w.status END,
        waiting_for = CASE WHEN {CHILDREN_WAIT_OVER} THEN NULL ELSE w.waiting_for END,
        available_at = CASE WHEN {CHILDREN_WAIT_OVER} THEN NULL ELSE w.available_at END,
        awaiting_children = CASE
            WHEN {CHILDREN_WAIT_OVER} THEN NULL
            WHEN w.waiting_for = '{_ALL_CHILDREN}' THEN (
                SELECT count(*)::int FROM durable_run c
                WHERE c.parent_run_id = w.run_id AND c.awaited_token = w.attempts AND c.status IN {LIVE})
            ELSE 1 END,
        updated_at = now()
    WHERE w.run_id = ANY(%(run_ids)s::text[]) AND w.status = 'waiting' AND w.waiting_for IN {_CHILDREN_WAITS}
    RETURNING w.status, w.queue
)
SELECT pg_notify('{WAKE_CHANNEL}', queue) FROM changed WHERE status = 'pending'
"""

# Lock some runs of one depth (children of one parent, the parent locked first), by run id.
LOCK_RUNS = "SELECT 1 FROM durable_run WHERE run_id = ANY(%(run_ids)s::text[]) ORDER BY run_id FOR UPDATE"

# Lock the live descendants of some runs, top down: by depth, then run id.
LOCK_LIVE_DESCENDANTS = f"""
WITH RECURSIVE tree AS (
    SELECT run_id, 1 AS depth FROM durable_run WHERE parent_run_id = ANY(%(roots)s::text[])
    UNION ALL
    SELECT c.run_id, tree.depth + 1 FROM durable_run c JOIN tree ON c.parent_run_id = tree.run_id
)
SELECT d.run_id FROM durable_run d JOIN tree USING (run_id)
WHERE d.status IN {LIVE}
ORDER BY tree.depth, d.run_id
FOR UPDATE OF d
"""

# The cascade over locked live descendants, each by the rule of cancel(); a pivoted run
# waiting for a child that this cascade ends is woken.
CASCADE = f"""
WITH targets AS (
    SELECT run_id, status AS before, pivoted_at IS NOT NULL AS pivoted,
           pivoted_at IS NULL AND (status IN ('pending', 'waiting')
                                   OR (status = 'running' AND attempt_started_at IS NULL)) AS ends
    FROM durable_run WHERE run_id = ANY(%(run_ids)s::text[]) AND status IN {LIVE}
), ended AS (
    SELECT '{WaitingFor.CHILD_PREFIX}' || run_id AS wait FROM targets WHERE ends
), cascaded AS (
    UPDATE durable_run d SET
        status = CASE
            WHEN t.ends THEN 'cancelled'
            WHEN t.pivoted AND d.status = 'waiting' AND d.waiting_for IN (SELECT wait FROM ended) THEN 'pending'
            ELSE d.status END,
        cancel_requested_at = CASE WHEN t.pivoted THEN d.cancel_requested_at
                                   ELSE coalesce(d.cancel_requested_at, now()) END,
        cancel_refused_at = CASE WHEN t.pivoted THEN coalesce(d.cancel_refused_at, now())
                                 ELSE d.cancel_refused_at END,
        finished_at = CASE WHEN t.ends THEN now() ELSE d.finished_at END,
        waiting_for = CASE WHEN t.ends OR (t.pivoted AND d.status = 'waiting'
                                           AND d.waiting_for IN (SELECT wait FROM ended))
                           THEN NULL ELSE d.waiting_for END,
        available_at = CASE WHEN t.ends OR (t.pivoted AND d.status = 'waiting'
                                            AND d.waiting_for IN (SELECT wait FROM ended))
                            THEN NULL ELSE d.available_at END,
        leased_until = CASE WHEN t.ends THEN NULL ELSE d.leased_until END,
        held_by = CASE WHEN t.ends THEN NULL ELSE d.held_by END,
        updated_at = CASE WHEN t.pivoted THEN d.updated_at ELSE now() END
    FROM targets t
    WHERE d.run_id = t.run_id
    RETURNING d.run_id, d.status, d.queue, t.ends, t.before, d.concurrency_key, d.concurrency_while_waiting,
              d.started_at IS NOT NULL AS started, d.waiting_for
)
SELECT concurrency_key, concurrency_while_waiting, started, queue, before, status,
       CASE WHEN ends THEN pg_notify('{DONE_CHANNEL}', run_id)
            WHEN status = 'pending' THEN pg_notify('{WAKE_CHANNEL}', queue) END,
       run_id, status = 'waiting' AND waiting_for IN {_CHILDREN_WAITS}
FROM cascaded
"""


@dataclass(frozen=True, slots=True)
class Finished:
    """A held run whose handler returned: what lands it succeeded."""

    run_id: str
    token: int
    output: str
    parent_run_id: str | None


def complete_many(finished: list[Finished]) -> set[str]:
    """Land successful attempts; returns the run ids the fence let through.

    Runs without kin land together in one statement; the others land per
    parent, each group in a transaction that locks the parent first.
    """
    if not finished:
        return set()
    with cursor() as cur:
        cur.execute(
            COMPLETE_ALONE,
            {**_batch(finished), "concurrency_queues": _concurrency_queues(), "queue_prefix": QUEUE_CONCURRENCY_PREFIX},
        )
        landed = {row[0] for row in cur.fetchall()}
    by_parent: dict[str | None, list[Finished]] = defaultdict(list)
    for item in finished:
        if item.run_id not in landed:
            by_parent[item.parent_run_id].append(item)
    for parent_run_id, group in by_parent.items():
        landed.update(in_transaction(land, parent_run_id, COMPLETE, _batch(group)))
    refused = [item for item in finished if item.run_id not in landed]
    if refused:
        with cursor() as cur:
            cur.execute(ALREADY_COMPLETED, _batch(refused))
            landed.update(row[0] for row in cur.fetchall())
    return landed


def _batch(items: list[Finished]) -> dict[str, Any]:
    return {
        "run_ids": [item.run_id for item in items],
        "tokens": [item.token for item in items],
        "outputs": [item.output for item in items],
    }


def fail(
    run_id: str,
    token: int,
    parent_run_id: str | None,
    *,
    error: str,
    error_type: str,
    final: bool,
    delay: float,
    counts_as_failure: bool = True,
    park: bool = False,
) -> str | None:
    """Record a failed attempt; returns the run's new status, or None if the fence refused it.

    Args:
        park: a final failure parks the run (status ``waiting``, waiting for an operator) instead.
    """
    params = {
        "park": park,
        "run_id": run_id,
        "token": token,
        "error": error,
        "error_type": error_type,
        "final": final,
        "delay": delay,
        "counts": 1 if counts_as_failure else 0,
    }
    return status_of(in_transaction(land, parent_run_id, FAIL, params))


def cancel_held(run_id: str, token: int, parent_run_id: str | None, *, requested_only: bool = False) -> str | None:
    """Land a held run cancelled; returns 'cancelled', or None if the fence (or a pivot) refused it.

    Args:
        requested_only: only if a cancel is requested now (one a cascade just asked for).
    """
    params = {"run_id": run_id, "token": token, "requested_only": requested_only}
    return status_of(in_transaction(land, parent_run_id, CANCEL_HELD, params))


def _concurrency_queues() -> list[str]:
    return sorted(queue for queue, limits in configured_queue_limits().items() if limits.concurrency is not None)


def status_of(landed: dict[str, str]) -> str | None:
    return next(iter(landed.values()), None)


def land(
    parent_run_id: str | None, statement: str, params: dict[str, Any], *, before: str = "running"
) -> dict[str, str]:
    """One landing transaction: lock the parent, land, wake the parent, cascade, release limit slots.

    Args:
        before: the status the landed runs had (a worker lands runs it holds: running).

    Returns:
        {run_id: new status} of the runs landed.
    """
    with cursor() as cur:
        if parent_run_id is not None:
            cur.execute(LOCK_RUN, [parent_run_id])
        cur.execute(statement, params)
        rows = cur.fetchall()
        landed = {run_id: status for run_id, status, *_ in rows}
        ended_states = ("succeeded", "failed", "cancelled")
        ended = [run_id for run_id, status in landed.items() if status in ended_states]
        if parent_run_id is not None and ended:
            _wake_parent(cur, parent_run_id, ended)
        changes = [
            flow.SlotChange(key, while_waiting, started, queue, before, status)
            for _, status, _, key, while_waiting, started, queue, *_ in rows
        ]
        # A run that ended, or whose cancel was requested (still running), cascades its cancel to its descendants;
        # one retried (pending) or parked (waiting for an operator) keeps them.
        cascade_from = [
            run_id
            for run_id, status, has_children, *_ in rows
            if has_children and status not in (RunStatus.PENDING, RunStatus.WAITING)
        ]
        if cascade_from:
            changes += _cascade(cur, cascade_from)
        # Last, after every row lock it needs: slots freed release the runs their limits held back.
        flow.release_slots(cur, changes)
    return landed


def _wake_parent(cur: CursorWrapper, parent_run_id: str, children: list[str]) -> None:
    cur.execute(
        WAKE_PARENT,
        {
            "parent_run_id": parent_run_id,
            "waits": [str(WaitingFor.child(child)) for child in children],
            "children": children,
        },
    )


def _cascade(cur: CursorWrapper, roots: list[str], *, include_roots: bool = False) -> list[flow.SlotChange]:
    """Apply the cancel rule to every live descendant of ``roots`` (and to the roots themselves with
    ``include_roots``, the caller having locked them), locked top down first.

    The tree is read again after each locking pass: a descendant that spawned a
    child while we waited for its lock brings that child in on the next pass.
    A pivoted descendant that waits for children the cascade ended has its wait
    counted again, and is woken if it is over.

    Returns:
        The descendants' status changes, for the limit slots they gave up.
    """
    locked: set[str] = set(roots) if include_roots else set()
    while True:
        cur.execute(LOCK_LIVE_DESCENDANTS, {"roots": roots})
        found = {row[0] for row in cur.fetchall()}
        if found <= locked:
            break
        locked |= found
    if not locked:
        return []
    cur.execute(CASCADE, {"run_ids": sorted(locked)})
    rows = cur.fetchall()
    waiting_for_children = [row[7] for row in rows if row[8]]
    if waiting_for_children:
        cur.execute(RECOUNT_CHILDREN_WAITS, {"run_ids": waiting_for_children})
    return [flow.SlotChange(*row[:6]) for row in rows]


def cancel_children(parent_run_id: str, child_ids: list[str]) -> None:
    """Cancel some children of a run this transaction has locked, and their descendants, by the rule of cancel().

    Pending and waiting ones end cancelled at once; running ones are asked to
    stop; those past a pivot carry on. (A wait_for_all's timeout.)
    """
    if not child_ids:
        return
    with cursor() as cur:
        cur.execute(LOCK_RUNS, {"run_ids": sorted(set(child_ids))})
        flow.release_slots(cur, _cascade(cur, sorted(set(child_ids)), include_roots=True))
