"""Statements that let time pass for one run or one schedule: what ``durable_django.testing`` offers tests.

A test should not sleep through a retry delay, a sleep, a wait's timeout, a
lease or a cron interval. These move the stored instants instead, exactly as
the passing of time would have, and nothing else.
"""

from __future__ import annotations

from ..types import Run, Schedule
from .db import RUN_COLUMNS, SCHEDULE_COLUMNS, cursor, in_transaction, row_to_run, row_to_schedule

# The journalled deadline of the run's current sleep or timed wait moves to now, with the run's.
DEADLINE_NOW = """
UPDATE durable_step SET result = jsonb_build_object('at', now())
WHERE run_id = %(run_id)s AND result ? 'at' AND (result->>'at')::timestamptz = (
    SELECT available_at FROM durable_run WHERE run_id = %(run_id)s AND status = 'waiting')
"""

# A pending run's delay or retry backoff, a waiting run's deadline, or a running run's lease (and any
# renewal of it beside the row) ends now.
DUE_NOW = f"""
WITH renewal AS (DELETE FROM durable_lease_renewal WHERE run_id = %(run_id)s)
UPDATE durable_run SET
    available_at = CASE WHEN status IN ('pending', 'waiting') AND available_at > now() THEN now()
                        ELSE available_at END,
    leased_until = CASE WHEN status = 'running' THEN now() - interval '1 millisecond' ELSE leased_until END
WHERE run_id = %(run_id)s
RETURNING {RUN_COLUMNS}
"""

# A run's deadline (and no other instant) passes now.
DEADLINE_PASSES = f"""
UPDATE durable_run SET deadline = now() - interval '1 millisecond'
WHERE run_id = %(run_id)s AND deadline IS NOT NULL
RETURNING {RUN_COLUMNS}
"""

# A schedule's clock moves on: its next tick comes that much sooner (past ticks are owed, as after downtime).
ADVANCE_SCHEDULE = f"""
UPDATE durable_schedule SET next_fire_at = next_fire_at - make_interval(secs => %(seconds)s::float8)
WHERE schedule_id = %(schedule_id)s
RETURNING {SCHEDULE_COLUMNS}
"""


def make_due(run_id: str) -> Run | None:
    """Let a run's clock run out now: its delay, backoff, sleep, wait timeout or lease. None if there is no run."""

    def work() -> Run | None:
        with cursor() as cur:
            cur.execute(DEADLINE_NOW, {"run_id": run_id})
            cur.execute(DUE_NOW, {"run_id": run_id})
            row = cur.fetchone()
        return row_to_run(row) if row else None

    return in_transaction(work)


def pass_deadline(run_id: str) -> Run | None:
    """Let a run's deadline pass now; None if there is no such run or it has no deadline."""
    with cursor() as cur:
        cur.execute(DEADLINE_PASSES, {"run_id": run_id})
        row = cur.fetchone()
    return row_to_run(row) if row else None


def advance_schedule(stored_id: str, seconds: float) -> Schedule | None:
    """Move a schedule's next tick ``seconds`` earlier; None if there is no such schedule."""
    with cursor() as cur:
        cur.execute(ADVANCE_SCHEDULE, {"schedule_id": stored_id, "seconds": seconds})
        row = cur.fetchone()
    return row_to_schedule(row) if row else None
