"""Cron schedules, as callers address them: create or update, read, list, enable, fire now, delete.

Schedule ids are tenant-scoped like idempotency keys. Every call takes part in
the caller's transaction on the ``DURABLE["DATABASE"]`` alias. Semantics
(misfires, DST, settings) are in docs/schedules.md.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from uuid import UUID

from ..engine import schedules as engine_schedules
from ..exceptions import InvalidInput
from ..storable import integer
from ..tenancy import normalize_tenant
from ..types import Run, Schedule, ScheduleRunRecord

SETTINGS_SOURCE = engine_schedules.SETTINGS_SOURCE


def schedule(
    schedule_id: str,
    name: str,
    cron: str,
    *,
    input: object = None,
    tz: str = "UTC",
    tenant_id: str | UUID | None = None,
    enabled: bool = True,
    overlap: str = "allow_all",
    catchup_window: timedelta | float | None = None,
    jitter: timedelta | float | None = None,
    pause_on_failure: bool = False,
) -> Schedule:
    """Create or update a cron schedule that enqueues ``name`` at every tick.

    An update keeps the pending ``next_fire_at`` while ``cron`` and ``tz`` are
    unchanged, so a restart never skips the fire owed after downtime; changing
    either recomputes it. Enabling a disabled schedule does not fire the ticks
    that passed while it was off.

    Args:
        schedule_id: the schedule's id, unique per tenant.
        name: the durable function each tick enqueues (registered in this process).
        cron: five fields, six with a leading seconds field, or an alias like ``@daily``.
        input: the JSON value every run gets as its input.
        tz: the IANA zone the cron's wall-clock times are read in.
        tenant_id: a UUID scoping the id and the runs; None is the untagged namespace.
        enabled: a disabled schedule keeps its row and fires nothing.
        overlap: what a tick does while a run of the schedule is live: ``"allow_all"`` (a run per
            tick), ``"skip"`` (no run), ``"buffer_one"`` (one run waits for the live one to end;
            later ticks are skipped meanwhile) or ``"cancel_previous"`` (the live run is cancelled).
        catchup_window: after downtime, every tick missed within this window fires, oldest first;
            None fires the one owed tick.
        jitter: each tick's run is due at a random instant within this after its tick.
        pause_on_failure: a failed run of the schedule disables it, the reason kept in ``paused_reason``.

    Returns:
        The stored schedule.

    Raises:
        InvalidSchedule: the cron expression or the zone is invalid; nothing is written.
        UnknownFunction: no function ``name`` is registered.
        InvalidInput: a bad id, tenant or input; nothing is written.
    """
    params = engine_schedules.schedule_params(
        schedule_id,
        name,
        cron,
        input=input,
        tz=tz,
        tenant_id=tenant_id,
        enabled=enabled,
        source=engine_schedules.API_SOURCE,
        overlap=overlap,
        catchup_window=catchup_window,
        jitter=jitter,
        pause_on_failure=pause_on_failure,
    )
    return engine_schedules.upsert(params, keep_disabled=False)


def create_schedule(
    schedule_id: str,
    name: str,
    cron: str,
    *,
    input: object = None,
    tz: str = "UTC",
    tenant_id: str | UUID | None = None,
    enabled: bool = True,
    overlap: str = "allow_all",
    catchup_window: timedelta | float | None = None,
    jitter: timedelta | float | None = None,
    pause_on_failure: bool = False,
) -> Schedule:
    """Like ``schedule()``, but only ever a new schedule: an id already taken in the tenant is refused.

    Raises:
        InvalidInput: the id is taken (nothing is changed), or any argument ``schedule()`` refuses.
    """
    params = engine_schedules.schedule_params(
        schedule_id,
        name,
        cron,
        input=input,
        tz=tz,
        tenant_id=tenant_id,
        enabled=enabled,
        source=engine_schedules.API_SOURCE,
        overlap=overlap,
        catchup_window=catchup_window,
        jitter=jitter,
        pause_on_failure=pause_on_failure,
    )
    created = engine_schedules.create(params)
    if created is None:
        raise InvalidInput(f"a schedule {schedule_id!r} already exists in this tenant", schedule_id=schedule_id)
    return created


def unschedule(schedule_id: str, *, tenant_id: str | UUID | None = None) -> bool:
    """Delete a schedule; runs it already enqueued are not touched.

    Returns:
        True if the schedule existed (in this tenant's namespace).
    """
    return engine_schedules.delete(engine_schedules.stored_id(schedule_id, tenant_id))


def get_schedule(schedule_id: str, *, tenant_id: str | UUID | None = None) -> Schedule | None:
    """One schedule, or None if this tenant's namespace has none with that id."""
    return engine_schedules.get(engine_schedules.stored_id(schedule_id, tenant_id))


def list_schedules(*, tenant_id: str | UUID | None = None) -> list[Schedule]:
    """Schedules by stored id: one tenant's, or (None) the operator's view of every schedule."""
    return engine_schedules.list_all(normalize_tenant(tenant_id))


def set_schedule_enabled(schedule_id: str, enabled: bool, *, tenant_id: str | UUID | None = None) -> Schedule:
    """Enable or disable a schedule (the admin's action).

    Re-enabling does not fire ticks that passed while the schedule was off. A
    schedule declared in ``DURABLE["SCHEDULES"]`` stays disabled across worker
    restarts.

    Raises:
        InvalidInput: ``enabled`` is not a bool, or no such schedule is in this tenant's namespace.
    """
    if not isinstance(enabled, bool):
        raise InvalidInput(f"enabled must be a bool, got {enabled!r}")
    return engine_schedules.set_enabled(engine_schedules.stored_id(schedule_id, tenant_id), schedule_id, enabled)


def fire_schedule_now(schedule_id: str, *, tenant_id: str | UUID | None = None) -> Run:
    """Enqueue one run of the schedule now, enabled or not, leaving its regular ticks as they are.

    Returns:
        The run, keyed ``schedule:{id}:manual:{now}``.

    Raises:
        InvalidInput: no such schedule in this tenant's namespace.
        UnknownFunction: this process has no function of the schedule's name.
    """
    return engine_schedules.fire_now(engine_schedules.stored_id(schedule_id, tenant_id), schedule_id)


def backfill(schedule_id: str, start: datetime, end: datetime, *, tenant_id: str | UUID | None = None) -> list[Run]:
    """Fire the schedule's ticks at or after ``start`` and before ``end``, oldest first.

    Each tick fires at most once, whoever else fires or backfills it: a tick that has a run
    already is left alone. The schedule's overlap policy decides each tick as if it came now;
    enabled or not, the schedule's regular ticks stay as they are.

    Returns:
        The runs this call made, oldest tick first.

    Raises:
        InvalidInput: no such schedule in this tenant's namespace, an instant that is naive, before
            1970 or (``end``) in the future, ``start`` not before ``end``, or too many ticks; nothing
            is written.
        UnknownFunction: this process has no function of the schedule's name.
    """
    return engine_schedules.backfill(engine_schedules.stored_id(schedule_id, tenant_id), schedule_id, start, end)


def schedule_runs(schedule_id: str, *, limit: int = 10, tenant_id: str | UUID | None = None) -> list[ScheduleRunRecord]:
    """The last ``limit`` runs the schedule made, newest first, with their status now."""
    return engine_schedules.recent_runs(
        engine_schedules.stored_id(schedule_id, tenant_id), integer(limit, what="limit", minimum=1, maximum=1000)
    )
