"""Statements on durable_replay_divergence: a replay that went another way than its run's journal."""

from __future__ import annotations

import json

from .db import cursor, in_transaction

RECORD = """
INSERT INTO durable_replay_divergence (run_id, attempt, step_id, unasked, created_at)
VALUES (%(run_id)s, %(attempt)s, %(step_id)s, %(unasked)s::jsonb, now())
"""


def record(run_id: str, attempt: int, step_id: str, unasked: list[str]) -> None:
    """Record one attempt's divergence (its own short transaction: it is a note, not part of the run's state)."""

    def work() -> None:
        with cursor() as cur:
            cur.execute(
                RECORD, {"run_id": run_id, "attempt": attempt, "step_id": step_id, "unasked": json.dumps(unasked)}
            )

    in_transaction(work)
