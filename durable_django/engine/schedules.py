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
from datetime import UTC, datetime
from typing import Any

from django.db import transaction

from ..exceptions import InvalidInput, InvalidSchedule
from ..registry import registry, validate_name
from ..store import schedules as schedule_store
from ..store.db import connection
from ..store.schedules import Fired
from ..tenancy import normalize_tenant, scope
from ..types import Run, Schedule
from ..values import json_text, text
from . import cron as cron_math
from . import submit

API_SOURCE, SETTINGS_SOURCE = "api", "settings"
# How far a schedule that is itself bad is postponed when it fails to fire.
FIRE_FAILURE_BACKOFF = schedule_store.FIRE_FAILURE_BACKOFF


def seconds_until_next_due(*, names: list[str], tenant_id: str | None) -> float | None:
    """Seconds until the next tick a scheduler with these functions could fire (negative when one is owed)."""
    return schedule_store.seconds_until_next_due(names=names, tenant_id=tenant_id)


def tick_key(schedule_id: str, tick: datetime) -> str:
    """The idempotency key of the run a schedule enqueues for one tick.

    Args:
        schedule_id: the schedule's id as its caller gave it (the tenant scopes the key separately).
        tick: the tick's instant.

    Returns:
        ``schedule:{schedule_id}:{tick in UTC, ISO 8601}``.
    """
    return f"schedule:{schedule_id}:{stamp(tick)}"


def fire_due(*, names: list[str], tenant_id: str | None, limit: int = 100, skip: Sequence[str] = ()) -> list[Fired]:
    """Fire the due schedules of functions in ``names`` (the scheduler's step).

    Misfire policy: a schedule found due fires once, for its owed tick (the
    stored ``next_fire_at``), however many ticks passed, and moves on to the
    first tick after now.

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


_ENTRY_KEYS = {"name", "cron", "tz", "input", "tenant_id", "enabled"}


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
) -> dict[str, Any]:
    """Validate everything a schedule names; nothing is written before this passes."""
    stored = stored_id(schedule_id, tenant_id)
    validate_name(name)
    registry.newest(name)  # UnknownFunction, like enqueue
    if not isinstance(enabled, bool):
        raise InvalidInput(f"enabled must be a bool, got {enabled!r}")
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
        "spec": spec,
    }


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
        schedule_store.mark_fired(stored)
        return run


def stored_id(schedule_id: object, tenant_id: object) -> str:
    """The id a schedule is stored under: the caller's id scoped by its tenant.

    Raises:
        InvalidInput: the id is not a non-empty string PostgreSQL can store (``scope`` alone lets None
            through, which the insert then refused with an IntegrityError).
    """
    return scope(text(schedule_id, what="schedule_id"), normalize_tenant(tenant_id), what="schedule_id")


def fire_tick(current: Schedule, now: datetime) -> tuple[Run, datetime]:
    """Enqueue the run of a due schedule's owed tick (its stored ``next_fire_at``).

    Args:
        current: the locked due schedule.
        now: the database's clock.

    Returns:
        (the run, the first tick after ``now``).

    Raises:
        InvalidSchedule: the stored cron or zone is corrupt (checked before anything is enqueued).
    """
    spec = cron_math.parse(current.cron, current.tz)
    run = enqueue_tick(current, tick_key(current.schedule_id, current.next_fire_at))
    return run, cron_math.next_fire_after(spec, now)


def enqueue_tick(current: Schedule, key: str) -> Run:
    """Enqueue through the normal submit path: retry snapshot, tenant scoping, NOTIFY on commit."""
    return submit.insert_or_join(
        submit.with_engine_key(submit.build(current.name, current.input, tenant_id=current.tenant_id), key)
    )


def stamp(instant: datetime) -> str:
    """An instant as the keys spell it: UTC, ISO 8601."""
    return instant.astimezone(UTC).isoformat()
