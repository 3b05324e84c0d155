"""The statement behind ``ctx.set_progress()``: the run's latest progress, written under the claim's fence.

Progress is not journalled: a replay does not return it and the latest write
wins. It is fenced like every write of an attempt, so a holder whose lease was
taken over cannot overwrite what the current holder reports.
"""

from __future__ import annotations

from ..exceptions import LeaseLost
from .db import cursor

# Store a held run's progress; returns its cancel flag, or nothing when the fence refuses the write. It touches
# no indexed column (not even updated_at), so PostgreSQL can make it a heap-only update.
SET_PROGRESS = """
UPDATE durable_run SET progress = %(progress)s::jsonb
WHERE run_id = %(run_id)s AND attempts = %(token)s AND status = 'running'
RETURNING cancel_requested_at IS NOT NULL AND pivoted_at IS NULL
"""


def set_progress(run_id: str, token: int, progress_json: str) -> bool:
    """Store the progress of a held run; returns whether a cancel was requested.

    Raises:
        LeaseLost: the run is no longer this holder's; nothing was written.
    """
    with cursor() as cur:
        cur.execute(SET_PROGRESS, {"run_id": run_id, "token": token, "progress": progress_json})
        row = cur.fetchone()
    if row is None:
        raise LeaseLost()
    cancel: bool = row[0]
    return cancel
