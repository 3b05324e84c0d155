"""Deadlines: the live runs past theirs, the soonest to come, and failing a run past its deadline.

Any worker fails any run whose deadline has passed, whatever it is doing (pending, waiting, or held by
another worker, whose fence then refuses its later writes), in a landing transaction (``landing.land``)
that locks its parent first and cancels its unfinished descendants.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from .db import cursor, in_transaction
from .kin import LIVE
from .landing import LANDED, LOCK_RUN, land, status_of

# Live runs whose deadline has passed by the database clock, soonest first. A run whose parent's deadline
# has passed too is left to its parent's end (its cascade), and a running run asked to stop is left to
# end cancelled at its next context call or heartbeat.
PAST_DEADLINE = f"""
SELECT r.run_id, r.parent_run_id, r.deadline FROM durable_run r
WHERE r.deadline <= now() AND r.status IN {LIVE}
  AND NOT (r.status = 'running' AND r.cancel_requested_at IS NOT NULL AND r.pivoted_at IS NULL)
  AND NOT EXISTS (SELECT 1 FROM durable_run p
                  WHERE p.run_id = r.parent_run_id AND p.deadline <= now() AND p.status IN {LIVE})
ORDER BY r.deadline
LIMIT %(limit)s
"""

# Seconds until the soonest deadline of a live run that has not passed yet (NULL: none).
NEXT_DEADLINE = f"""
SELECT extract(epoch FROM min(deadline) - now())::float8 FROM durable_run
WHERE deadline > now() AND status IN {LIVE}
"""

# A run's status, read in a statement of its own once its lock is held.
SELECT_STATUS = "SELECT status FROM durable_run WHERE run_id = %s"

# Fail a live run whose deadline has passed (locked, its parent first), whatever it is doing: the
# fence of its holder, if any, refuses that holder's later writes.
EXPIRE = f"""
WITH landed AS (
    UPDATE durable_run SET status = 'failed', error = %(error)s, error_type = %(error_type)s, finished_at = now(),
        leased_until = NULL, waiting_for = NULL, available_at = NULL, held_by = NULL, updated_at = now()
    WHERE run_id = %(run_id)s AND deadline <= now() AND status IN {LIVE}
      AND NOT (status = 'running' AND cancel_requested_at IS NOT NULL AND pivoted_at IS NULL)
    RETURNING *
)
{LANDED}
"""


@dataclass(frozen=True, slots=True)
class PastDeadline:
    """A live run whose deadline has passed."""

    run_id: str
    parent_run_id: str | None
    deadline: datetime


def past_deadline(limit: int) -> list[PastDeadline]:
    """Up to ``limit`` live runs whose deadline has passed, soonest first (see PAST_DEADLINE)."""
    with cursor() as cur:
        cur.execute(PAST_DEADLINE, {"limit": limit})
        return [PastDeadline(*row) for row in cur.fetchall()]


def seconds_until_next_deadline() -> float | None:
    """Seconds until the soonest deadline of a live run that has not passed yet; None if there is none."""
    with cursor() as cur:
        cur.execute(NEXT_DEADLINE)
        seconds: float | None = cur.fetchone()[0]
        return seconds


def expire(run: PastDeadline, *, error: str, error_type: str) -> str | None:
    """Fail a run whose deadline has passed, whatever it is doing, and cancel its unfinished descendants.

    Returns:
        'failed', or None if it is no longer live (or is asked to stop while running) by the time it is locked.
    """

    def work() -> str | None:
        with cursor() as cur:
            if run.parent_run_id is not None:
                cur.execute(LOCK_RUN, [run.parent_run_id])
            cur.execute(LOCK_RUN, [run.run_id])
            cur.execute(SELECT_STATUS, [run.run_id])
            row = cur.fetchone()
        if row is None:
            return None
        params = {"run_id": run.run_id, "error": error, "error_type": error_type}
        return status_of(land(run.parent_run_id, EXPIRE, params, before=row[0]))

    return in_transaction(work)
