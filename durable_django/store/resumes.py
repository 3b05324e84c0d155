"""Resuming a run: a failed, cancelled or parked run goes back to pending, its journal intact.

The run is locked after its parent (``cancellation.lock_parent_of``), and a child
whose parent has finished is refused: nothing would ever wait for it again.
"""

from __future__ import annotations

from django.db import IntegrityError

from ..exceptions import InvalidInput
from ..states import COALESCE_CONSTRAINT, TERMINAL_STATUSES
from ..types import Run
from .cancellation import lock_parent_of
from .db import RUN_COLUMNS, WAKE_CHANNEL, constraint_of, cursor, in_transaction, row_to_run
from .journal import REKEY_JOURNAL

# A parent's status, read after its lock was taken (a statement of its own).
SELECT_STATUS = "SELECT status FROM durable_run WHERE run_id = %s"

# resume(): a failed or cancelled run, or a parked one, goes back to pending with its journal and a fresh budget.
RESUME = f"""
WITH resumed AS (
    UPDATE durable_run SET status = 'pending', version = coalesce(%(version)s::int, version),
        failures = 0, recoveries = 0, available_at = NULL,
        leased_until = NULL, finished_at = NULL, waiting_for = NULL, error = NULL, error_type = NULL, deadline = NULL,
        parked_at = NULL,
        -- A run whose concurrency counts while it waits holds its slot once started: resumed from an end,
        -- it is admitted again first (a parked run still holds it, as a waiting one does).
        started_at = CASE WHEN concurrency_while_waiting AND status <> 'waiting' THEN NULL ELSE started_at END,
        cancel_requested_at = NULL, cancel_refused_at = NULL, updated_at = now()
    WHERE run_id = %(run_id)s AND (status IN ('failed', 'cancelled') OR (status = 'waiting' AND parked_at IS NOT NULL))
    RETURNING *
)
SELECT {RUN_COLUMNS}, (SELECT count(*) FROM (SELECT pg_notify('{WAKE_CHANNEL}', queue) FROM resumed) n)
FROM resumed
"""


def resume(run_id: str, tenant_id: str | None, *, version: int | None = None) -> Run | None:
    """Resume a failed, cancelled or parked run (on ``version``, its journal re-keyed to it, when given); None if no
    such run is visible or it is not resumable.

    Raises:
        InvalidInput: the run's parent has finished, so nothing would ever wait for it again; or it was
            never claimed and another unclaimed run took its coalesce key meanwhile.
    """
    params = {"run_id": run_id, "tenant_id": tenant_id, "version": version}

    def work() -> Run | None:
        with cursor() as cur:
            found, parent_run_id = lock_parent_of(cur, params)
            if not found:
                return None
            if parent_run_id is not None:
                cur.execute(SELECT_STATUS, [parent_run_id])
                parent = cur.fetchone()
                if parent is None or parent[0] in TERMINAL_STATUSES:
                    raise InvalidInput(
                        f"run {run_id} is a child of run {parent_run_id}, which has finished: resume the parent, "
                        "or retry this run as a new run",
                        run_id=run_id,
                    )
            try:
                cur.execute(RESUME, params)
            except IntegrityError as exc:
                if constraint_of(exc) != COALESCE_CONSTRAINT:
                    raise
                raise InvalidInput(
                    f"run {run_id} was never claimed and another unclaimed run now holds its coalesce key: "
                    "that run does its work; retry this one as a new run if it must run too",
                    run_id=run_id,
                ) from None
            row = cur.fetchone()
            if row is not None and version is not None:
                cur.execute(REKEY_JOURNAL, {"run_id": run_id, "version": version})
        return row_to_run(row) if row else None

    return in_transaction(work)
