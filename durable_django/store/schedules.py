"""Statements on durable_schedule: upsert, delete, read, enable, and the due claim.

Schedule ids arrive here already tenant-scoped (``{tenant_id}:{id}`` or ``:{id}``).
The due claim locks due rows under ``FOR UPDATE SKIP LOCKED`` and, in the same
transaction, lets the caller enqueue each tick's run and then advances
``next_fire_at``: any number of schedulers fire each tick once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import DatabaseError, transaction

from ..types import Run, Schedule
from .db import SCHEDULE_COLUMNS, connection, cursor, row_to_schedule
from .schedule_runs import NO_LIVE_RUN

# How far a schedule that is itself bad (its fire failed for a reason other than the database:
# a corrupt cron or zone, an enqueue refused) is pushed back, so it leaves the head of the due
# order and blocks no other schedule.
FIRE_FAILURE_BACKOFF = timedelta(hours=1)

# Insert or update one schedule. next_fire_at is kept while cron and tz are unchanged,
# so a restart never skips the fire owed after downtime. A disabled schedule that is
# enabled again does not owe the ticks that passed meanwhile. With keep_disabled
# (settings sync) an operator's disable survives: enabled only ever goes down.
UPSERT = f"""
INSERT INTO durable_schedule AS s (
    schedule_id, name, cron, tz, input, next_fire_at, enabled, tenant_id, source, created_at, updated_at,
    overlap, catchup_window, jitter, pause_on_failure)
VALUES (%(schedule_id)s, %(name)s, %(cron)s, %(tz)s, %(input)s::jsonb, %(next_fire_at)s, %(enabled)s,
        %(tenant_id)s, %(source)s, now(), now(),
        %(overlap)s, %(catchup_window)s, %(jitter)s, %(pause_on_failure)s)
ON CONFLICT (schedule_id) DO UPDATE SET
    overlap = EXCLUDED.overlap,
    catchup_window = EXCLUDED.catchup_window,
    jitter = EXCLUDED.jitter,
    pause_on_failure = EXCLUDED.pause_on_failure,
    paused_reason = CASE WHEN NOT s.enabled AND EXCLUDED.enabled AND NOT %(keep_disabled)s THEN NULL
                         ELSE s.paused_reason END,
    name = EXCLUDED.name,
    input = EXCLUDED.input,
    source = EXCLUDED.source,
    cron = EXCLUDED.cron,
    tz = EXCLUDED.tz,
    enabled = CASE WHEN %(keep_disabled)s THEN s.enabled AND EXCLUDED.enabled ELSE EXCLUDED.enabled END,
    next_fire_at = CASE
        WHEN s.cron IS DISTINCT FROM EXCLUDED.cron OR s.tz IS DISTINCT FROM EXCLUDED.tz THEN EXCLUDED.next_fire_at
        WHEN NOT s.enabled AND EXCLUDED.enabled AND NOT %(keep_disabled)s AND s.next_fire_at <= now()
            THEN EXCLUDED.next_fire_at
        ELSE s.next_fire_at END,
    updated_at = now()
RETURNING {SCHEDULE_COLUMNS}
"""

# Insert one schedule unless its id is taken.
INSERT = f"""
INSERT INTO durable_schedule (
    schedule_id, name, cron, tz, input, next_fire_at, enabled, tenant_id, source, created_at, updated_at,
    overlap, catchup_window, jitter, pause_on_failure)
VALUES (%(schedule_id)s, %(name)s, %(cron)s, %(tz)s, %(input)s::jsonb, %(next_fire_at)s, %(enabled)s,
        %(tenant_id)s, %(source)s, now(), now(),
        %(overlap)s, %(catchup_window)s, %(jitter)s, %(pause_on_failure)s)
ON CONFLICT (schedule_id) DO NOTHING
RETURNING {SCHEDULE_COLUMNS}
"""

DELETE = "DELETE FROM durable_schedule WHERE schedule_id = %s"

# Settings-declared schedules whose entry is gone.
DELETE_UNDECLARED = """
DELETE FROM durable_schedule WHERE source = 'settings' AND NOT (schedule_id = ANY(%s::text[]))
RETURNING schedule_id
"""

SELECT_ONE = f"SELECT {SCHEDULE_COLUMNS} FROM durable_schedule WHERE schedule_id = %s"

LOCK_ONE = f"SELECT {SCHEDULE_COLUMNS}, now() FROM durable_schedule WHERE schedule_id = %s FOR UPDATE"

# All schedules, or one tenant's, by id.
SELECT_ALL = f"""
SELECT {SCHEDULE_COLUMNS} FROM durable_schedule
WHERE (%(tenant_id)s::uuid IS NULL OR tenant_id = %(tenant_id)s::uuid)
ORDER BY schedule_id
"""

# Enable or disable; re-enabling a schedule whose tick passed while it was disabled moves it to the next tick,
# and forgets why it paused itself.
SET_ENABLED = f"""
UPDATE durable_schedule SET
    paused_reason = CASE WHEN %(enabled)s THEN NULL ELSE paused_reason END,
    next_fire_at = CASE WHEN %(enabled)s AND NOT enabled AND next_fire_at <= now()
                             AND %(fresh)s::timestamptz IS NOT NULL
                        THEN %(fresh)s::timestamptz ELSE next_fire_at END,
    enabled = %(enabled)s,
    updated_at = now()
WHERE schedule_id = %(schedule_id)s
RETURNING {SCHEDULE_COLUMNS}
"""

_BOUNDS = """
  AND name = ANY(%(names)s::text[])
  AND (%(tenant_id)s::uuid IS NULL OR tenant_id = %(tenant_id)s::uuid)
"""

# A buffered tick is due once the schedule has no live run.
_BUFFERED_DUE = f"(buffered_tick IS NOT NULL AND {NO_LIVE_RUN})"

# Due enabled schedules of functions this scheduler can run, oldest tick first, skipping rows
# another scheduler holds (it is firing them right now) and those the caller asks to skip.
CLAIM_DUE = f"""
SELECT {SCHEDULE_COLUMNS}, schedule_id, now() FROM durable_schedule s
WHERE enabled AND (next_fire_at <= now() OR {_BUFFERED_DUE}) {_BOUNDS}
  AND NOT (schedule_id = ANY(%(skip)s::text[]))
ORDER BY next_fire_at
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED
"""

ADVANCE = """
UPDATE durable_schedule SET next_fire_at = %(next_fire_at)s, last_fired_at = now()
WHERE schedule_id = %(schedule_id)s
"""

POSTPONE = """
UPDATE durable_schedule SET next_fire_at = now() + make_interval(secs => %(seconds)s::float8)
WHERE schedule_id = %(schedule_id)s
"""

MARK_FIRED = "UPDATE durable_schedule SET last_fired_at = now() WHERE schedule_id = %s"

# Seconds until the next tick this scheduler could fire (negative when one is overdue).
NEXT_DUE = f"""
SELECT extract(epoch FROM min(CASE WHEN {_BUFFERED_DUE} THEN now() ELSE next_fire_at END) - now())::float8
FROM durable_schedule s
WHERE enabled {_BOUNDS}
"""

SELECT_NOW = "SELECT now()"


@dataclass(frozen=True, slots=True)
class TickFire:
    """One tick a fire handled: the run it made, or None when the overlap policy (or an earlier fire) made none."""

    tick: datetime
    run: Run | None
    # What the overlap policy did with it: "fired", "skipped", "buffered" or "existed" (an earlier fire made it).
    action: str


@dataclass(frozen=True, slots=True)
class Fired:
    """What one due schedule's fire did: the ticks it handled, or the error that stopped it.

    ``postponed`` tells the two errors apart: True, the schedule itself is bad and was
    pushed back FIRE_FAILURE_BACKOFF; False, the database failed and its tick is still owed.
    ``stored_id`` is the tenant-scoped id, for ``claim_due(skip=...)``.
    """

    stored_id: str
    schedule: Schedule
    run: Run | None
    error: Exception | None
    postponed: bool = False
    ticks: tuple[TickFire, ...] = ()


def database_now() -> datetime:
    """The database's clock (the transaction's start inside a transaction)."""
    with cursor() as cur:
        cur.execute(SELECT_NOW)
        now: datetime = cur.fetchone()[0]
        return now


def upsert(params: dict[str, Any], *, keep_disabled: bool = False) -> Schedule:
    with cursor() as cur:
        cur.execute(UPSERT, {**params, "keep_disabled": keep_disabled})
        return row_to_schedule(cur.fetchone())


def insert(params: dict[str, Any]) -> Schedule | None:
    """Insert a schedule; None when its id is taken."""
    with cursor() as cur:
        cur.execute(INSERT, params)
        row = cur.fetchone()
    return row_to_schedule(row) if row else None


def delete(schedule_id: str) -> bool:
    with cursor() as cur:
        cur.execute(DELETE, [schedule_id])
        deleted: bool = cur.rowcount > 0
        return deleted


def delete_undeclared(declared_ids: list[str]) -> list[str]:
    """Delete settings-sourced schedules not in ``declared_ids``; returns the stored ids deleted."""
    with cursor() as cur:
        cur.execute(DELETE_UNDECLARED, [list(declared_ids)])
        return [row[0] for row in cur.fetchall()]


def get(schedule_id: str) -> Schedule | None:
    with cursor() as cur:
        cur.execute(SELECT_ONE, [schedule_id])
        row = cur.fetchone()
    return row_to_schedule(row) if row else None


def lock(schedule_id: str) -> tuple[Schedule, datetime] | None:
    """Lock one schedule row for the caller's transaction; returns it with the database's now."""
    with cursor() as cur:
        cur.execute(LOCK_ONE, [schedule_id])
        row = cur.fetchone()
    return (row_to_schedule(row), row[-1]) if row else None


def list_all(tenant_id: str | None) -> list[Schedule]:
    with cursor() as cur:
        cur.execute(SELECT_ALL, {"tenant_id": tenant_id})
        return [row_to_schedule(row) for row in cur.fetchall()]


def set_enabled(schedule_id: str, enabled: bool, fresh_next_fire_at: datetime | None) -> Schedule | None:
    with cursor() as cur:
        cur.execute(SET_ENABLED, {"schedule_id": schedule_id, "enabled": enabled, "fresh": fresh_next_fire_at})
        row = cur.fetchone()
    return row_to_schedule(row) if row else None


def mark_fired(schedule_id: str) -> None:
    with cursor() as cur:
        cur.execute(MARK_FIRED, [schedule_id])


def claim_due(
    *,
    names: list[str],
    tenant_id: str | None,
    limit: int,
    fire: Callable[[str, Schedule, datetime], tuple[list[TickFire], datetime]],
    skip: Sequence[str] = (),
) -> list[Fired]:
    """Fire up to ``limit`` due schedules in one transaction.

    For each locked due schedule, ``fire(stored_id, schedule, database_now)`` handles
    its owed ticks and returns them with the next fire time; the row advances before
    the transaction commits. A ``fire`` that raises is rolled back to its
    savepoint. A database error leaves the schedule due, its tick owed to the
    next pass; any other error means the schedule itself is bad, and it is
    postponed by FIRE_FAILURE_BACKOFF so it never blocks the others.

    Args:
        names: function names this scheduler can run; other schedules stay due for another worker.
        tenant_id: only this tenant's schedules, or None for all.
        limit: at most this many schedules in one transaction.
        fire: enqueues one schedule's tick.
        skip: stored ids to leave alone (due ticks the database refused earlier in this pass).

    Returns:
        One Fired per due schedule this call locked.
    """
    alias = connection().alias
    outcomes: list[Fired] = []
    with transaction.atomic(using=alias):
        with cursor() as cur:
            cur.execute(CLAIM_DUE, {"names": list(names), "tenant_id": tenant_id, "limit": limit, "skip": list(skip)})
            rows = cur.fetchall()
        for row in rows:
            schedule, stored_id, now = row_to_schedule(row), row[-2], row[-1]
            try:
                with transaction.atomic(using=alias):
                    ticks, next_fire_at = fire(stored_id, schedule, now)
                    with cursor() as cur:
                        cur.execute(ADVANCE, {"schedule_id": stored_id, "next_fire_at": next_fire_at})
            except DatabaseError as exc:
                if transaction.get_rollback(using=alias):
                    raise  # not even the savepoint rolled back: the connection is gone, and this batch with it
                outcomes.append(Fired(stored_id, schedule, None, exc))
            except Exception as exc:  # noqa: BLE001 - one schedule's failure must not stop the batch
                with cursor() as cur:
                    cur.execute(POSTPONE, {"schedule_id": stored_id, "seconds": FIRE_FAILURE_BACKOFF.total_seconds()})
                outcomes.append(Fired(stored_id, schedule, None, exc, postponed=True))
            else:
                made = [tick.run for tick in ticks if tick.run is not None]
                outcomes.append(Fired(stored_id, schedule, made[0] if made else None, None, ticks=tuple(ticks)))
    return outcomes


def seconds_until_next_due(*, names: list[str], tenant_id: str | None) -> float | None:
    with cursor() as cur:
        cur.execute(NEXT_DUE, {"names": list(names), "tenant_id": tenant_id})
        due: float | None = cur.fetchone()[0]
        return due
