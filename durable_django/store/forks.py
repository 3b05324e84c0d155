"""Forks: a new run of the same function and input on a copy of a journal's prefix.

A journal entry's id carries the version of the code that wrote it
(``v{version}:{name}:{occurrence}``): a fork on another version copies the
entries re-keyed to that version, so its code replays them (a resume on
another version re-keys the run's own journal: store/journal.py).
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from ..submission import SubmitRequest
from ..types import Run
from . import inserts
from .db import cursor, in_transaction
from .journal import REKEYED_STEP_ID
from .runs import get_run


def lineage(run_id_sql: str) -> str:
    """SQL for the run ``run_id_sql`` names and every run it was forked from (a fork's copied spawns are
    children of one of them): a primary-key probe for a run that is no fork."""
    return f"""(WITH RECURSIVE lineage(id) AS (
        SELECT {run_id_sql}
        UNION SELECT f.forked_from ->> 'run_id' FROM durable_run f JOIN lineage ON f.run_id = lineage.id
        WHERE f.forked_from IS NOT NULL)
    SELECT id FROM lineage)"""


# A run's journal in the order it was written (the step ids only).
JOURNAL_ORDER = "SELECT step_id, created_at FROM durable_step WHERE run_id = %s ORDER BY created_at, step_id"

# Copy entries of the original's journal to the fork, for the fork's version.
COPY_STEPS = f"""
INSERT INTO durable_step (run_id, step_id, result, tenant_id, created_at)
SELECT %(run_id)s, {REKEYED_STEP_ID}, s.result, s.tenant_id, s.created_at
FROM durable_step s WHERE s.run_id = %(original)s AND s.step_id = ANY (%(step_ids)s::text[])
"""

MARK_FORK = "UPDATE durable_run SET forked_from = %(forked_from)s::jsonb WHERE run_id = %(run_id)s"


def journal_order(run_id: str) -> list[tuple[str, datetime]]:
    """(step id, when it was journalled) of each entry, oldest first."""
    with cursor() as cur:
        cur.execute(JOURNAL_ORDER, [run_id])
        return [(step_id, created_at) for step_id, created_at in cur.fetchall()]


def fork(request: SubmitRequest, *, original: str, step_ids: list[str], forked_from: dict[str, Any]) -> Run:
    """Insert the fork (``request``, keyless) with its copied journal entries, in one transaction."""

    def work() -> Run:
        run = inserts.insert_run(request)
        assert run is not None, "a fork has no key that could join another run"
        with cursor() as cur:
            cur.execute(MARK_FORK, {"run_id": run.run_id, "forked_from": json.dumps(forked_from)})
            cur.execute(
                COPY_STEPS,
                {"run_id": run.run_id, "original": original, "step_ids": step_ids, "version": request.template.version},
            )
        stored = get_run(run.run_id)
        assert stored is not None
        return stored

    return in_transaction(work)
