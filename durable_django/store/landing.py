"""Landing: the transactions that end runs, and what must follow in the same transaction.

A run that lands terminal wakes its parent if the parent waits for it, and its
unfinished descendants are cancelled by the rule of ``cancel()``; that part,
the landing's kin, is ``kin``. Listeners hear ``durable_done`` for every run that
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

from ..flow_control import QUEUE_CONCURRENCY_PREFIX, configured_queue_limits
from ..journal_ids import WaitingFor
from ..states import RunStatus
from . import flow
from .db import DONE_CHANNEL, WAKE_CHANNEL, cursor, in_transaction
from .kin import TERMINAL, cascade, wake_parent

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
SELECT {_RETURNING}, CASE WHEN status IN {TERMINAL} THEN pg_notify('{DONE_CHANNEL}', run_id) END
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
SELECT {_RETURNING}, CASE WHEN status IN {TERMINAL} THEN pg_notify('{DONE_CHANNEL}', run_id) END,
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
            wake_parent(cur, parent_run_id, ended)
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
            changes += cascade(cur, cascade_from)
        # Last, after every row lock it needs: slots freed release the runs their limits held back.
        flow.release_slots(cur, changes)
    return landed
