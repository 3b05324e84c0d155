"""Reading a run's attempts: the ended ones as their landing wrote them, and the one running now.

An attempt's record is written by the statement that ends it (migration 0017's trigger on
``durable_run``); the attempt a worker holds now has no record yet, and is read from the run itself.
"""

from __future__ import annotations

from ..types import AttemptRecord
from .db import cursor

# The ended attempts of a run, then the one running now (from the run), oldest first.
LIST_ATTEMPTS = """
SELECT number, worker_id, started_at, ended_at, outcome, error, error_type, waited_for
FROM durable_attempt WHERE run_id = %(run_id)s
UNION ALL
SELECT attempts, worker_id, coalesce(attempt_started_at, claimed_at), NULL, 'running', NULL, NULL, NULL
FROM durable_run WHERE run_id = %(run_id)s AND status = 'running'
ORDER BY 1
"""

# The errors of a run's failed attempts, oldest first.
ATTEMPT_ERRORS = """
SELECT error_type, error FROM durable_attempt
WHERE run_id = %(run_id)s AND error IS NOT NULL
ORDER BY number
"""


def list_attempts(run_id: str) -> list[AttemptRecord]:
    """The run's attempts, oldest first (none for a run never claimed, or no such run)."""
    with cursor() as cur:
        cur.execute(LIST_ATTEMPTS, {"run_id": run_id})
        return [
            AttemptRecord(
                number=number,
                worker_id=worker_id,
                started_at=started_at,
                ended_at=ended_at,
                outcome=outcome,
                error=error,
                error_type=error_type,
                waited_for=waited_for,
            )
            for number, worker_id, started_at, ended_at, outcome, error, error_type, waited_for in cur.fetchall()
        ]


def attempt_errors(run_id: str) -> list[tuple[str | None, str]]:
    """(error_type, error) of each attempt that ended with an error, oldest first."""
    with cursor() as cur:
        cur.execute(ATTEMPT_ERRORS, {"run_id": run_id})
        return [(error_type, error) for error_type, error in cur.fetchall()]
