"""A landing's kin: the parent it wakes and the descendants its cancel cascades to.

A run that lands terminal wakes its parent if the parent waits for it (a
children wait counts down, and wakes at zero); a run that ends, or whose cancel
is requested, has its unfinished descendants cancelled by the rule of
``cancel()`` (pending, waiting, or claimed but not started: cancelled; running:
cancel requested; past a pivot: refused), and a pivoted waiting descendant
whose awaited children the cascade ends has its wait counted again. Every
function here runs inside a transaction that has locked the parent (or the
roots) already, and takes the rest of its locks in the order ``landing``
describes; ``landing``, ``bulk`` and ``waits`` call it.
"""

from __future__ import annotations

from django.db.backends.utils import CursorWrapper

from ..journal_ids import WaitingFor
from . import flow
from .db import DONE_CHANNEL, WAKE_CHANNEL, cursor

# The statuses of runs that ended and of runs that have not, as SQL lists.
TERMINAL = "('succeeded', 'failed', 'cancelled')"
LIVE = "('pending', 'running', 'waiting')"
_CHILDREN_WAITS = "(" + ", ".join(f"'{wait}'" for wait in WaitingFor.children_waits()) + ")"
_ALL_CHILDREN = str(WaitingFor.children(wait_all=True))

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
        WHERE c.parent_run_id = w.run_id AND c.awaited_token = w.attempts AND c.status IN {TERMINAL})))"""

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


def wake_parent(cur: CursorWrapper, parent_run_id: str, children: list[str]) -> None:
    """Count children that just ended toward the wait of their parent (locked already), and wake it if it is
    over (``WAKE_PARENT``)."""
    cur.execute(
        WAKE_PARENT,
        {
            "parent_run_id": parent_run_id,
            "waits": [str(WaitingFor.child(child)) for child in children],
            "children": children,
        },
    )


def cascade(cur: CursorWrapper, roots: list[str], *, include_roots: bool = False) -> list[flow.SlotChange]:
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
        flow.release_slots(cur, cascade(cur, sorted(set(child_ids)), include_roots=True))
