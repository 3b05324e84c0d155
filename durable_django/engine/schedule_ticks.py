"""A schedule's ticks becoming runs: the catch-up window, jitter, the overlap policy, and backfill.

Every tick's run is keyed by (schedule, tick) and made under the schedule's row
lock (the scheduler's ``FOR UPDATE SKIP LOCKED`` claim, or a backfill's
``FOR UPDATE``), so a tick makes at most one run whoever fires or backfills it.
The overlap policy is decided under that same lock, against the schedule's
live runs as ``durable_schedule_run`` records them.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

from ..store import cancellation
from ..store import schedule_runs as schedule_run_store
from ..store.schedules import TickFire
from ..submission import RunOptions
from ..types import Run, Schedule
from . import cron as cron_math
from . import submit

ALLOW_ALL, SKIP, BUFFER_ONE, CANCEL_PREVIOUS = "allow_all", "skip", "buffer_one", "cancel_previous"
OVERLAP_POLICIES = (ALLOW_ALL, SKIP, BUFFER_ONE, CANCEL_PREVIOUS)
# A catch-up fires at most this many ticks per pass; the rest stay owed to the next pass, oldest first.
MAX_TICKS_PER_FIRE = 100
# A backfill covers at most this many ticks (a typo in a year must not enqueue half a million runs).
MAX_BACKFILL_TICKS = 10_000
_JUST_BEFORE = timedelta(microseconds=1)


def tick_key(schedule_id: str, tick: datetime) -> str:
    """The idempotency key of the run a schedule enqueues for one tick.

    Args:
        schedule_id: the schedule's id as its caller gave it (the tenant scopes the key separately).
        tick: the tick's instant.

    Returns:
        ``schedule:{schedule_id}:{tick in UTC, ISO 8601}``.
    """
    return f"schedule:{schedule_id}:{stamp(tick)}"


def stamp(instant: datetime) -> str:
    """An instant as the keys spell it: UTC, ISO 8601."""
    return instant.astimezone(UTC).isoformat()


def owed_ticks(spec: cron_math.CronSpec, owed: datetime, now: datetime, window: timedelta | None) -> list[datetime]:
    """The ticks a due schedule fires now, oldest first (at most MAX_TICKS_PER_FIRE).

    Without a window, the owed tick alone (one fire after downtime, however long). With one,
    every tick from the owed one (or the first within the window, if the owed one is older)
    up to now.
    """
    if window is None:
        return [owed]
    tick = owed if owed >= now - window else cron_math.next_fire_after(spec, now - window - _JUST_BEFORE)
    ticks: list[datetime] = []
    while tick <= now and len(ticks) < MAX_TICKS_PER_FIRE:
        ticks.append(tick)
        tick = cron_math.next_fire_after(spec, tick)
    return ticks


def next_after_fire(
    spec: cron_math.CronSpec, fired: list[datetime], now: datetime, window: timedelta | None
) -> datetime:
    """The next tick a schedule owes once ``fired`` are handled: after now, or the first not yet fired."""
    if window is None or not fired:
        return cron_math.next_fire_after(spec, now)
    return cron_math.next_fire_after(spec, fired[-1])


def fire_tick(stored_id: str, current: Schedule, now: datetime) -> tuple[list[TickFire], datetime]:
    """Fire a due schedule (locked by the caller): its buffered tick if the live run ended, then its owed ticks.

    Args:
        stored_id: the schedule's tenant-scoped id.
        current: the locked schedule.
        now: the database's clock.

    Returns:
        (what each tick did, the schedule's next fire time).

    Raises:
        InvalidSchedule: the stored cron or zone is corrupt (checked before anything is enqueued).
    """
    spec = cron_math.parse(current.cron, current.tz)
    handled: list[TickFire] = []
    buffered = current.buffered_tick
    if current.buffered_tick is not None and not schedule_run_store.live_runs(stored_id):
        schedule_run_store.set_buffered(stored_id, None)
        buffered = None
        handled.append(make_tick_run(stored_id, current, current.buffered_tick))
    if current.next_fire_at > now:
        return handled, current.next_fire_at
    ticks = owed_ticks(spec, current.next_fire_at, now, current.catchup_window)
    for tick in ticks:
        outcome = fire_under_policy(stored_id, current, tick, buffered)
        if outcome.action == "buffered":
            buffered = tick
        handled.append(outcome)
    return handled, next_after_fire(spec, ticks, now, current.catchup_window)


def fire_under_policy(stored_id: str, current: Schedule, tick: datetime, buffered: datetime | None) -> TickFire:
    """Fire one tick as the schedule's overlap policy says, given its live runs now."""
    if schedule_run_store.has_tick(stored_id, tick):
        return TickFire(tick, None, "existed")
    if current.overlap == ALLOW_ALL:
        return make_tick_run(stored_id, current, tick)
    live = schedule_run_store.live_runs(stored_id)
    if live and current.overlap == SKIP:
        return TickFire(tick, None, "skipped")
    if live and current.overlap == BUFFER_ONE:
        if buffered is not None:
            return TickFire(tick, None, "skipped")
        schedule_run_store.set_buffered(stored_id, tick)
        return TickFire(tick, None, "buffered")
    if live and current.overlap == CANCEL_PREVIOUS:
        for run_id in live:
            cancellation.cancel(run_id, current.tenant_id)
    return make_tick_run(stored_id, current, tick)


def make_tick_run(stored_id: str, current: Schedule, tick: datetime) -> TickFire:
    """Enqueue a tick's run (due within the schedule's jitter after the tick) and record it with the schedule."""
    available_at = None
    if current.jitter is not None and current.jitter > timedelta(0):
        available_at = tick + timedelta(seconds=random.uniform(0, current.jitter.total_seconds()))
    options = RunOptions.of(tenant_id=current.tenant_id, available_at=available_at)
    tick_run = submit.request(current.name, current.input, options).with_engine_key(tick_key(current.schedule_id, tick))
    run, created = submit.submit_or_find(tick_run)
    schedule_run_store.record(stored_id, tick, run.run_id)
    return TickFire(tick, run, "fired" if created else "existed")


def enqueue_tick(current: Schedule, key: str) -> Run:
    """Enqueue through the normal submit path: retry snapshot, tenant scoping, NOTIFY on commit."""
    options = RunOptions.of(tenant_id=current.tenant_id)
    return submit.submit(submit.request(current.name, current.input, options).with_engine_key(key))


def backfill_ticks(spec: cron_math.CronSpec, start: datetime, end: datetime) -> list[datetime]:
    """The ticks at or after ``start`` and before ``end``, oldest first, at most MAX_BACKFILL_TICKS + 1."""
    ticks: list[datetime] = []
    tick = cron_math.next_fire_after(spec, start - _JUST_BEFORE)
    while tick < end and len(ticks) <= MAX_BACKFILL_TICKS:
        ticks.append(tick)
        tick = cron_math.next_fire_after(spec, tick)
    return ticks


def backfill_locked(stored_id: str, current: Schedule, ticks: list[datetime]) -> list[Run]:
    """Fire ``ticks`` of a schedule locked by the caller under its overlap policy; the runs this call made."""
    made: list[Run] = []
    buffered = current.buffered_tick
    for tick in ticks:
        outcome = fire_under_policy(stored_id, current, tick, buffered)
        if outcome.action == "buffered":
            buffered = tick
        if outcome.action == "fired" and outcome.run is not None:
            made.append(outcome.run)
    return made
