"""Cron schedules in the engine: validating a schedule, firing ticks, and syncing ``DURABLE["SCHEDULES"]``.

A schedule enqueues one run of a durable function per cron tick, keyed by
(schedule, tick) so that no tick ever makes two runs. Schedule ids are
tenant-scoped like idempotency keys. The client API (``api.schedules``) and
the worker's scheduler thread call in here; semantics (misfires, DST,
settings) are in docs/schedules.md.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import transaction

from ..exceptions import InvalidInput, InvalidSchedule
from ..registry import registry, validate_name
from ..storable import instant, json_text, name, seconds
from ..store import schedule_runs as schedule_run_store
from ..store import schedules as schedule_store
from ..store.db import connection
from ..store.schedules import Fired as Fired
from ..tenancy import normalize_tenant, scope
from ..types import Run, Schedule, ScheduleRunRecord
from . import cron as cron_math
from . import schedule_ticks
from .schedule_ticks import OVERLAP_POLICIES, enqueue_tick, stamp
from .schedule_ticks import fire_tick as fire_tick  # re-exported: a tick's fire and key belong to this face
from .schedule_ticks import tick_key as tick_key

API_SOURCE, SETTINGS_SOURCE = "api", "settings"
# How far a schedule that is itself bad is postponed when it fails to fire.
FIRE_FAILURE_BACKOFF = schedule_store.FIRE_FAILURE_BACKOFF


def seconds_until_next_due(*, names: list[str], tenant_id: str | None) -> float | None:
    """Seconds until the next tick a scheduler with these functions could fire (negative when one is owed)."""
    return schedule_store.seconds_until_next_due(names=names, tenant_id=tenant_id)


def fire_due(*, names: list[str], tenant_id: str | None, limit: int = 100, skip: Sequence[str] = ()) -> list[Fired]:
    """Fire the due schedules of functions in ``names`` (the scheduler's step).

    Misfire policy: without a ``catchup_window`` a schedule found due fires once,
    for its owed tick (the stored ``next_fire_at``), however many ticks passed,
    and moves on to the first tick after now; with one, each tick missed within
    the window fires, oldest first. The overlap policy decides each tick.

    Args:
        names: the function names this scheduler's worker has.
        tenant_id: only this tenant's schedules; None for every tenant.
        limit: at most this many schedules in one transaction.
        skip: stored ids (``Fired.stored_id``) to leave alone, such as ticks the database refused in this pass.

    Returns:
        One Fired per schedule this call handled. A schedule that is itself bad is
        postponed; one whose fire the database refused stays due.
    """
    if not names:
        return []
    return schedule_store.claim_due(names=names, tenant_id=tenant_id, limit=limit, fire=fire_tick, skip=skip)


def sync_settings_schedules(declared: object) -> tuple[list[Schedule], list[str], dict[object, Exception]]:
    """Make the settings-sourced schedules match ``DURABLE["SCHEDULES"]`` (``declared``).

    Entries are upserted keeping ``next_fire_at`` while cron and zone hold, and
    never re-enabled once an operator disabled them; settings-sourced schedules
    whose entry is gone are deleted. An invalid entry is reported and skipped
    (its stored schedule, if any, is left as it is).

    Args:
        declared: schedule id -> entry with ``name``, ``cron`` and optional
            ``tz``, ``input``, ``tenant_id``, ``enabled`` (docs/schedules.md).

    Returns:
        (schedules upserted, stored ids deleted, {entry id: error} for invalid entries).
    """
    if not isinstance(declared, dict):
        raise InvalidInput('DURABLE["SCHEDULES"] must be a dict of schedule id -> entry')
    valid, invalid = _validate_entries(declared)
    kept_ids = [params["schedule_id"] for params in valid]
    for schedule_id in invalid:
        entry = declared[schedule_id]
        tenant = entry.get("tenant_id") if isinstance(entry, dict) else None
        with contextlib.suppress(InvalidInput):
            kept_ids.append(stored_id(schedule_id, tenant))
    with transaction.atomic(using=connection().alias):
        upserted = [upsert(params, keep_disabled=True) for params in valid]
        deleted = schedule_store.delete_undeclared(kept_ids)
    return upserted, deleted, invalid


def declared_schedule_errors(declared: object) -> dict[object, Exception]:
    """{entry id: error} for the entries of ``DURABLE["SCHEDULES"]`` that a sync would skip (no database access)."""
    if not isinstance(declared, dict):
        return {None: InvalidInput('DURABLE["SCHEDULES"] must be a dict of schedule id -> entry')}
    return _validate_entries(declared)[1]


_ENTRY_KEYS = {
    "name",
    "cron",
    "tz",
    "input",
    "tenant_id",
    "enabled",
    "overlap",
    "catchup_window",
    "jitter",
    "pause_on_failure",
}


def _validate_entries(declared: Mapping[object, object]) -> tuple[list[dict[str, Any]], dict[object, Exception]]:
    """(params of the valid entries, {entry id: error} for the others), each entry validated on its own."""
    valid: list[dict[str, Any]] = []
    invalid: dict[object, Exception] = {}
    for schedule_id in sorted(declared, key=str):
        try:
            valid.append(_settings_params(schedule_id, declared[schedule_id]))
        # Settings are data: whatever one entry raises (an input nested too deep for JSON is a
        # RecursionError) is that entry's error, and must not stop the check or the other entries.
        except Exception as exc:  # noqa: BLE001
            invalid[schedule_id] = exc
    return valid, invalid


def _settings_params(schedule_id: object, entry: object) -> dict[str, Any]:
    if not isinstance(entry, dict):
        raise InvalidInput(f"schedule {schedule_id!r}: an entry must be a dict")
    unknown = set(entry) - _ENTRY_KEYS
    if unknown:
        raise InvalidInput(f"schedule {schedule_id!r}: unknown keys {sorted(unknown)}")
    missing = {"name", "cron"} - set(entry)
    if missing:
        raise InvalidInput(f"schedule {schedule_id!r}: missing {sorted(missing)}")
    return schedule_params(
        schedule_id,
        entry["name"],
        entry["cron"],
        input=entry.get("input"),
        tz=entry.get("tz", "UTC"),
        tenant_id=entry.get("tenant_id"),
        enabled=entry.get("enabled", True),
        source=SETTINGS_SOURCE,
        overlap=entry.get("overlap", schedule_ticks.ALLOW_ALL),
        catchup_window=entry.get("catchup_window"),
        jitter=entry.get("jitter"),
        pause_on_failure=entry.get("pause_on_failure", False),
    )


def schedule_params(
    schedule_id: object,
    name: str,
    cron_expression: str,
    *,
    input: object,
    tz: str,
    tenant_id: object,
    enabled: bool,
    source: str,
    overlap: object = schedule_ticks.ALLOW_ALL,
    catchup_window: object = None,
    jitter: object = None,
    pause_on_failure: object = False,
) -> dict[str, Any]:
    """Validate everything a schedule names; nothing is written before this passes."""
    stored = stored_id(schedule_id, tenant_id)
    validate_name(name)
    registry.newest(name)  # UnknownFunction, like enqueue
    if not isinstance(enabled, bool):
        raise InvalidInput(f"enabled must be a bool, got {enabled!r}")
    if not isinstance(overlap, str) or overlap not in OVERLAP_POLICIES:
        raise InvalidInput(f"overlap must be one of {', '.join(OVERLAP_POLICIES)}, got {overlap!r}", overlap=overlap)
    if not isinstance(pause_on_failure, bool):
        raise InvalidInput(f"pause_on_failure must be a bool, got {pause_on_failure!r}")
    spec = cron_math.parse(cron_expression, tz)
    return {
        "schedule_id": stored,
        "name": name,
        "cron": spec.expression,
        "tz": tz,
        "input": json_text(input, what="input"),
        "tenant_id": normalize_tenant(tenant_id),
        "enabled": enabled,
        "source": source,
        "overlap": overlap,
        "catchup_window": _duration(catchup_window, "catchup_window"),
        "jitter": _duration(jitter, "jitter"),
        "pause_on_failure": pause_on_failure,
        "spec": spec,
    }


def _duration(value: object, what: str) -> timedelta | None:
    """A policy's duration (a timedelta or seconds) as a timedelta; None stays None."""
    secs = seconds(value, what=what)
    return None if secs is None else timedelta(seconds=secs)


def upsert(params: dict[str, Any], *, keep_disabled: bool) -> Schedule:
    """Insert or update a validated schedule, its next tick computed from the database's clock."""
    spec = params.pop("spec")
    with transaction.atomic(using=connection().alias):
        params["next_fire_at"] = cron_math.next_fire_after(spec, schedule_store.database_now())
        return schedule_store.upsert(params, keep_disabled=keep_disabled)


def create(params: dict[str, Any]) -> Schedule | None:
    """Insert a validated schedule unless its id is taken (then None): an add never becomes a change."""
    spec = params.pop("spec")
    with transaction.atomic(using=connection().alias):
        params["next_fire_at"] = cron_math.next_fire_after(spec, schedule_store.database_now())
        return schedule_store.insert(params)


def lock_or_refuse(stored: str, schedule_id: str) -> tuple[Schedule, datetime]:
    """Lock a schedule row for an operator change; (schedule, database now), or InvalidInput."""
    locked = schedule_store.lock(stored)
    if locked is None:
        raise InvalidInput(f"no schedule {schedule_id!r}", schedule_id=schedule_id)
    return locked


def set_enabled(stored: str, schedule_id: str, enabled: bool) -> Schedule:
    """Enable or disable a schedule; re-enabling skips the ticks that passed while it was off."""
    with transaction.atomic(using=connection().alias):
        current, now = lock_or_refuse(stored, schedule_id)
        try:
            fresh = cron_math.next_fire_after(cron_math.parse(current.cron, current.tz), now)
        except InvalidSchedule:
            fresh = None  # a corrupt stored cron keeps its next_fire_at; firing will postpone it
        updated = schedule_store.set_enabled(stored, enabled, fresh)
        assert updated is not None, "the row is locked by this transaction, so the update finds it"
        return updated


def fire_now(stored: str, schedule_id: str) -> Run:
    """Enqueue one run of a schedule now, keyed ``schedule:{id}:manual:{now}``; its ticks stay as they are."""
    with transaction.atomic(using=connection().alias):
        current, now = lock_or_refuse(stored, schedule_id)
        run = enqueue_tick(current, f"schedule:{current.schedule_id}:manual:{stamp(now)}")
        schedule_run_store.record(stored, None, run.run_id)
        schedule_store.mark_fired(stored)
        return run


def delete(stored: str) -> bool:
    """Delete a schedule (runs it enqueued stay); whether it existed."""
    return schedule_store.delete(stored)


def get(stored: str) -> Schedule | None:
    return schedule_store.get(stored)


def list_all(tenant_id: str | None) -> list[Schedule]:
    """Schedules by stored id: one tenant's, or (None) every schedule."""
    return schedule_store.list_all(tenant_id)


def recent_runs(stored: str, limit: int) -> list[ScheduleRunRecord]:
    """The last ``limit`` runs the schedule made, newest first, with their status now."""
    return schedule_run_store.recent(stored, limit)


def stored_id(schedule_id: object, tenant_id: object) -> str:
    """The id a schedule is stored under: the caller's id scoped by its tenant.

    Raises:
        InvalidInput: the id is not a non-empty string PostgreSQL can store (``scope`` alone lets None
            through, which the insert then refused with an IntegrityError).
    """
    return scope(name(schedule_id, what="schedule_id"), normalize_tenant(tenant_id), what="schedule_id")


def backfill(stored: str, schedule_id: str, start: object, end: object) -> list[Run]:
    """Fire the ticks in [start, end) under the schedule's overlap policy; the runs this call made.

    Ticks that already have a run (the scheduler's, or another backfill's) are left alone: the
    schedule's row lock orders concurrent backfills and fires, and the run key makes each tick once.

    Raises:
        InvalidInput: no such schedule, instants not aware, ``start`` not before ``end``, ``end`` in the
            future, or more than MAX_BACKFILL_TICKS ticks; nothing is written.
    """
    start_at, end_at = instant(start, what="start"), instant(end, what="end")
    if start_at is None or end_at is None:
        raise InvalidInput("backfill needs a start and an end")
    if start_at >= end_at:
        raise InvalidInput(f"start must be before end, got {start_at.isoformat()} and {end_at.isoformat()}")
    if start_at.astimezone(UTC).year < 1970:
        raise InvalidInput("start must not be before 1970")
    with transaction.atomic(using=connection().alias):
        current, now = lock_or_refuse(stored, schedule_id)
        if end_at > now:
            raise InvalidInput(f"end must not be in the future (now is {now.isoformat()})")
        ticks = schedule_ticks.backfill_ticks(cron_math.parse(current.cron, current.tz), start_at, end_at)
        if len(ticks) > schedule_ticks.MAX_BACKFILL_TICKS:
            raise InvalidInput(f"a backfill covers at most {schedule_ticks.MAX_BACKFILL_TICKS} ticks; narrow it")
        return schedule_ticks.backfill_locked(stored, current, ticks)


def settle_ended_runs(limit: int = 1000) -> list[tuple[str, str]]:
    """Note the schedules' runs that ended; pause the schedules with ``pause_on_failure`` one of whose runs failed.

    Returns:
        (stored id, reason) of each schedule paused by this call.
    """
    paused: list[tuple[str, str]] = []
    while True:
        with transaction.atomic(using=connection().alias):
            count, newly = schedule_run_store.settle(limit)
        paused.extend(newly)
        if count < limit:
            return paused
