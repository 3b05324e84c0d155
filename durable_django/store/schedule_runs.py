"""Statements on durable_schedule_run: which runs a schedule made, which of them are live, which failed.

A schedule's overlap policy asks whether a run it made is still live; its
pause on failure asks whether one ended failed; the admin shows its last runs.
Each fire records its run here in the firing transaction. ``settle`` looks at
the records whose run has not been seen to end (a partial index keeps them
few), stamps each ended one with its outcome, and disables, in the same
statement, every schedule with ``pause_on_failure`` one of whose runs failed.
"""

from __future__ import annotations

from datetime import datetime

from ..types import ScheduleRunRecord
from .db import cursor

_LIVE = "('pending', 'running', 'waiting')"

# A schedule's run for a tick (or, tick NULL, fired by hand); a tick recorded already keeps its first run.
RECORD = """
INSERT INTO durable_schedule_run (schedule_id, tick, run_id, created_at)
VALUES (%(schedule_id)s, %(tick)s, %(run_id)s, now())
ON CONFLICT (schedule_id, tick) DO NOTHING
"""

# The schedule's runs that are live, oldest first.
LIVE_RUNS = f"""
SELECT f.run_id FROM durable_schedule_run f JOIN durable_run r ON r.run_id = f.run_id
WHERE f.schedule_id = %(schedule_id)s AND f.outcome IS NULL AND r.status IN {_LIVE}
ORDER BY f.id
"""

# SQL for "this schedule (aliased s) has no live run", shared with the due claim.
NO_LIVE_RUN = f"""NOT EXISTS (
    SELECT 1 FROM durable_schedule_run f JOIN durable_run r ON r.run_id = f.run_id
    WHERE f.schedule_id = s.schedule_id AND f.outcome IS NULL AND r.status IN {_LIVE})"""

HAS_TICK = "SELECT EXISTS (SELECT 1 FROM durable_schedule_run WHERE schedule_id = %s AND tick = %s)"

SET_BUFFERED = "UPDATE durable_schedule SET buffered_tick = %(tick)s WHERE schedule_id = %(schedule_id)s"

# Records whose run ended (or vanished) get its outcome; a failure disables a schedule that pauses on one.
# Records another scheduler is settling are skipped, so two settles never wait on each other.
SETTLE = f"""
WITH open AS (
    SELECT f.id FROM durable_schedule_run f
    WHERE f.outcome IS NULL
      AND NOT EXISTS (SELECT 1 FROM durable_run r WHERE r.run_id = f.run_id AND r.status IN {_LIVE})
    ORDER BY f.id
    LIMIT %(limit)s
    FOR UPDATE OF f SKIP LOCKED
),
settled AS (
    UPDATE durable_schedule_run f SET outcome = coalesce(
        (SELECT r.status FROM durable_run r WHERE r.run_id = f.run_id), 'purged')
    FROM open WHERE f.id = open.id
    RETURNING f.id, f.schedule_id, f.run_id, f.outcome
),
first_failure AS (
    SELECT DISTINCT ON (settled.schedule_id) settled.schedule_id, settled.run_id, r.error_type, r.finished_at
    FROM settled JOIN durable_run r ON r.run_id = settled.run_id
    WHERE settled.outcome = 'failed'
    ORDER BY settled.schedule_id, settled.id
),
paused AS (
    UPDATE durable_schedule s SET
        enabled = false,
        paused_reason = 'run ' || first_failure.run_id || ' failed'
            || coalesce(' (' || first_failure.error_type || ')', '')
            || coalesce(' at ' || to_char(first_failure.finished_at AT TIME ZONE 'UTC',
                                          'YYYY-MM-DD HH24:MI:SS "UTC"'), ''),
        updated_at = now()
    FROM first_failure
    WHERE s.schedule_id = first_failure.schedule_id AND s.pause_on_failure AND s.enabled
    RETURNING s.schedule_id, s.paused_reason
)
SELECT (SELECT count(*) FROM settled), schedule_id, paused_reason FROM paused
UNION ALL
SELECT (SELECT count(*) FROM settled), NULL, NULL WHERE NOT EXISTS (SELECT 1 FROM paused)
"""

RECENT = """
SELECT f.run_id, f.tick, coalesce(r.status, f.outcome, 'purged'), f.created_at
FROM durable_schedule_run f LEFT JOIN durable_run r ON r.run_id = f.run_id
WHERE f.schedule_id = %(schedule_id)s
ORDER BY f.id DESC
LIMIT %(limit)s
"""


def record(schedule_id: str, tick: datetime | None, run_id: str) -> None:
    """Record the run a schedule made for a tick (None: fired by hand)."""
    with cursor() as cur:
        cur.execute(RECORD, {"schedule_id": schedule_id, "tick": tick, "run_id": run_id})


def live_runs(schedule_id: str) -> list[str]:
    """The run ids of the schedule's live runs, oldest first."""
    with cursor() as cur:
        cur.execute(LIVE_RUNS, {"schedule_id": schedule_id})
        return [row[0] for row in cur.fetchall()]


def has_tick(schedule_id: str, tick: datetime) -> bool:
    """Whether the schedule has made a run for this tick already."""
    with cursor() as cur:
        cur.execute(HAS_TICK, [schedule_id, tick])
        found: bool = cur.fetchone()[0]
        return found


def set_buffered(schedule_id: str, tick: datetime | None) -> None:
    """Set (or, None, clear) the tick that waits for the schedule's live run to end."""
    with cursor() as cur:
        cur.execute(SET_BUFFERED, {"schedule_id": schedule_id, "tick": tick})


def settle(limit: int) -> tuple[int, list[tuple[str, str]]]:
    """Stamp up to ``limit`` ended runs' records; returns (how many, [(stored id, reason)] of schedules paused)."""
    with cursor() as cur:
        cur.execute(SETTLE, {"limit": limit})
        rows = cur.fetchall()
    return rows[0][0], [(row[1], row[2]) for row in rows if row[1] is not None]


def recent(schedule_id: str, limit: int) -> list[ScheduleRunRecord]:
    """The schedule's last ``limit`` runs, newest first, with their status now."""
    with cursor() as cur:
        cur.execute(RECENT, {"schedule_id": schedule_id, "limit": limit})
        return [
            ScheduleRunRecord(run_id=run_id, tick=tick, status=status, created_at=created_at)
            for run_id, tick, status, created_at in cur.fetchall()
        ]
