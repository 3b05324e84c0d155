"""The read behind the Django Tasks backend's ``get_result``.

A ``TaskResult`` needs facts the ``Run`` record does not carry: when the
latest attempt was claimed (``last_attempted_at``), the worker each attempt
journalled (``worker_ids``) and the error of each failed attempt (``errors``).
One statement reads them with the run.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..types import Run
from .db import RUN_COLUMN_COUNT, cursor, from_json, qualified_run_columns, row_to_run

# A run of one version, with its latest claim time, its whole journal as a JSON object, and the
# (error_type, error) of each attempt that ended with one, oldest first.
SELECT_RUN_WITH_JOURNAL = f"""
SELECT {qualified_run_columns("r")}, r.claimed_at,
       (SELECT jsonb_object_agg(s.step_id, s.result) FROM durable_step s WHERE s.run_id = r.run_id)::text,
       (SELECT json_agg(json_build_array(a.error_type, a.error) ORDER BY a.number) FROM durable_attempt a
        WHERE a.run_id = r.run_id AND a.error IS NOT NULL)::text
FROM durable_run r
WHERE r.run_id = %(run_id)s AND r.version = %(version)s
"""


@dataclass(frozen=True, slots=True, kw_only=True)
class RunWithJournal:
    run: Run
    # When the latest attempt was claimed; None before the first claim.
    claimed_at: datetime | None
    # step_id -> decoded JSON value, as a worker's attempt sees it.
    journal: dict[str, Any]
    # (error class path, traceback) of each attempt that ended with an error, oldest first.
    attempt_errors: list[tuple[str | None, str]]


def get_run_with_journal(run_id: str, *, version: int) -> RunWithJournal | None:
    """The run ``run_id`` if it has ``version``, with its claim time and journal; else None."""
    with cursor() as cur:
        cur.execute(SELECT_RUN_WITH_JOURNAL, {"run_id": run_id, "version": version})
        row = cur.fetchone()
    if row is None:
        return None
    claimed_at, journal = row[RUN_COLUMN_COUNT], from_json(row[RUN_COLUMN_COUNT + 1])
    errors = [(error_type, error) for error_type, error in from_json(row[RUN_COLUMN_COUNT + 2]) or []]
    return RunWithJournal(run=row_to_run(row), claimed_at=claimed_at, journal=journal or {}, attempt_errors=errors)
