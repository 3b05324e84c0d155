"""cancel(): end a run that is not executing, ask an executing one to stop, refuse a finished or pivoted one.

The run's parent is locked before the run (lock order: parent first), and the outcome is decided after
the run's lock is held, in a statement of its own (``landing`` says why).
"""

from __future__ import annotations

from typing import Any

from django.db.backends.utils import CursorWrapper

from ..states import CancelOutcome
from .db import cursor, in_transaction
from .landing import LANDED, LOCK_RUN, land

# A visible run's parent, read without a lock (it never changes), so that the parent is locked first.
SELECT_PARENT = """
SELECT parent_run_id FROM durable_run
WHERE run_id = %(run_id)s AND (%(tenant_id)s::uuid IS NULL OR tenant_id = %(tenant_id)s::uuid)
"""

# Lock a run for cancel() (its parent already locked) and read what decides the outcome.
LOCK_FOR_CANCEL = """
SELECT status = 'running' AND attempt_started_at IS NOT NULL, status IN ('succeeded', 'failed', 'cancelled'),
       pivoted_at IS NOT NULL, status
FROM durable_run WHERE run_id = %(run_id)s
FOR UPDATE
"""

# cancel() of a run that is not executing (pending, waiting, or claimed but not started): it ends now.
CANCEL_NOW = f"""
WITH landed AS (
    UPDATE durable_run SET status = 'cancelled', cancel_requested_at = coalesce(cancel_requested_at, now()),
        finished_at = now(), waiting_for = NULL, available_at = NULL, leased_until = NULL, held_by = NULL,
        updated_at = now()
    WHERE run_id = %(run_id)s
    RETURNING *
)
{LANDED}
"""

# cancel() of an executing run: ask it to stop at its next context call or heartbeat.
CANCEL_REQUEST = f"""
WITH landed AS (
    UPDATE durable_run SET cancel_requested_at = coalesce(cancel_requested_at, now()), updated_at = now()
    WHERE run_id = %(run_id)s
    RETURNING *
)
{LANDED}
"""

# cancel() of a finished or pivoted run: note the first refusal, change nothing else.
CANCEL_REFUSE = """
UPDATE durable_run SET cancel_refused_at = coalesce(cancel_refused_at, now()) WHERE run_id = %(run_id)s
"""


def lock_parent_of(cur: CursorWrapper, params: dict[str, Any]) -> tuple[bool, str | None]:
    """Before an operator's write locks a run (``run_id``, seen by ``tenant_id``), lock its parent, if it has one.

    Returns:
        Whether the run is visible, and its parent's id.
    """
    cur.execute(SELECT_PARENT, params)
    row = cur.fetchone()
    if row is None:
        return False, None
    parent_run_id: str | None = row[0]
    if parent_run_id is not None:
        cur.execute(LOCK_RUN, [parent_run_id])
    return True, parent_run_id


def cancel(run_id: str, tenant_id: str | None) -> CancelOutcome | None:
    """cancel(): returns the CancelOutcome, or None if no such run is visible."""
    params = {"run_id": run_id, "tenant_id": tenant_id}

    def work() -> CancelOutcome | None:
        with cursor() as cur:
            found, parent_run_id = lock_parent_of(cur, params)
            if not found:
                return None
            cur.execute(LOCK_FOR_CANCEL, params)
            executing, finished, pivoted, status = cur.fetchone()
        if finished or pivoted:
            with cursor() as cur:
                cur.execute(CANCEL_REFUSE, params)
            return CancelOutcome.REFUSED
        if executing:
            land(None, CANCEL_REQUEST, params)
            return CancelOutcome.REQUESTED
        land(parent_run_id, CANCEL_NOW, params, before=status)
        return CancelOutcome.CANCELLED

    return in_transaction(work)
