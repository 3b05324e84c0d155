"""Submitting runs: validation, key scoping, version choice and the retry snapshot."""

from __future__ import annotations

import functools
import json
from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone

from .. import storable
from ..conf import durable_settings
from ..exceptions import InvalidInput
from ..flow_control import Debounce, RunLimits, run_limits
from ..registry import TASK_PATH_VERSION, Registration, registry, validate_name
from ..states import MAX_PRIORITY, MIN_PRIORITY
from ..storable import instant, integer, json_text, seconds
from ..store import inserts
from ..store import runs as run_store
from ..tenancy import normalize_tenant, scope, scope_engine_key
from ..types import RetryPolicy, Run
from . import signalling, tracing

# Keys the engine makes for itself: a spawned child's and a schedule tick's. A caller's key
# may not start with these, or it could take (or pre-empt) a run the engine means to make.
RESERVED_KEY_PREFIXES = ("spawn:", "schedule:")


def build(
    name: str,
    input: object = None,
    *,
    idempotency_key: str | None = None,
    coalesce_key: str | None = None,
    tenant_id: object = None,
    delay: timedelta | float | None = None,
    available_at: datetime | None = None,
    version: int | None = None,
    queue: str = "default",
    priority: int = 0,
    parent_run_id: str | None = None,
    retry: RetryPolicy | None = None,
    debounce: Debounce | None = None,
    deadline: datetime | timedelta | float | None = None,
) -> dict[str, Any]:
    """Validate everything a caller's submit names and return the store's insert parameters.

    The function's limit keys are computed here, once, from the input, and stored on the run.

    Raises:
        InvalidInput: any bad value, a reserved key, keys that cannot be combined, or a limit's key
            callable that raised or returned no str; nothing is written.
        UnknownFunction: no function ``name`` is registered (and no version was given).
    """
    params, registration = prepare(
        name,
        input,
        idempotency_key=idempotency_key,
        coalesce_key=coalesce_key,
        tenant_id=tenant_id,
        delay=delay,
        available_at=available_at,
        version=version,
        queue=queue,
        priority=priority,
        parent_run_id=parent_run_id,
        retry=retry,
        debounce=debounce,
        deadline=deadline,
    )
    if registration is not None and (registration.concurrency or registration.rate_limit):
        # The key callables see the input as the handler will: decoded from its JSON.
        limits = run_limits(name, json.loads(params["input"]), registration.concurrency, registration.rate_limit)
        params.update(limit_params(limits))
    if debounce is not None:
        params.update(
            debounce_key=scope_engine_key(f"{name}:{debounce.key}", params["tenant_id"]),
            delay=debounce.delay_seconds,
            debounce_max_wait=debounce.max_wait_seconds,
        )
    return params


def prepare(
    name: str,
    input: object,
    *,
    idempotency_key: str | None,
    coalesce_key: str | None,
    tenant_id: object,
    delay: timedelta | float | None,
    available_at: datetime | None,
    version: int | None,
    queue: str,
    priority: int,
    parent_run_id: str | None,
    retry: RetryPolicy | None,
    debounce: Debounce | None,
    deadline: datetime | timedelta | float | None,
) -> tuple[dict[str, Any], Registration | None]:
    """Everything of :func:`build` but the limit keys: the insert parameters and the registration, if any."""
    validate_name(name)
    if version is not None and integer(version, what="version", minimum=0) == TASK_PATH_VERSION:
        raise InvalidInput("version 0 is reserved for Django Tasks runs: enqueue those through the Tasks backend")
    for key, what in ((idempotency_key, "idempotency_key"), (coalesce_key, "coalesce_key")):
        if key is not None:
            unreserved(key, what)
    if idempotency_key is not None and coalesce_key is not None:
        # A coalesced submit joins a run that has a key of its own (or none): the idempotency
        # key could not be kept, so a later submit with it would make a second run.
        raise InvalidInput("give either idempotency_key or coalesce_key, not both")
    if debounce is not None:
        if not isinstance(debounce, Debounce):
            raise InvalidInput(f"debounce must be a Debounce, got {debounce!r}")
        if idempotency_key is not None or coalesce_key is not None:
            raise InvalidInput("debounce cannot be combined with idempotency_key or coalesce_key")
        if delay is not None or available_at is not None:
            raise InvalidInput("debounce sets the start itself: give no delay or available_at")
    registration: Registration | None
    if version is None:
        registration = registry.newest(name)
    elif registry.knows(name):
        registration = registry.get(name, version)
    else:
        # A version no process here registers may still be run by another deploy's workers.
        registration = None
    params = _params(
        name,
        input,
        registration.version if registration else version,
        tenant_id=tenant_id,
        idempotency_key=idempotency_key,
        coalesce_key=coalesce_key,
        delay=delay,
        available_at=available_at,
        queue=queue,
        priority=priority,
        parent_run_id=parent_run_id,
        retry=retry or (registration.retry if registration else None),
        deadline=deadline,
    )
    return params, registration


def unreserved(key: object, what: str) -> str:
    """A caller's key, refused when it starts with a prefix the engine keeps for its own keys."""
    if storable.name(key, what=what).startswith(RESERVED_KEY_PREFIXES):
        raise InvalidInput(
            f"{what} {key!r} starts with a prefix reserved for the engine's own keys "
            f"({', '.join(RESERVED_KEY_PREFIXES)})"
        )
    assert isinstance(key, str)  # storable.name() let it through
    return key


def build_task_run(
    path: str,
    payload: object,
    *,
    queue: str,
    priority: int,
    available_at: datetime | None,
    retry: RetryPolicy | None,
    idempotency_key: str | None = None,
) -> dict[str, Any]:
    """The insert parameters of a Django Tasks run: named by its task's import path, version 0."""
    return _params(
        storable.name(path, what="task path"),
        payload,
        TASK_PATH_VERSION,
        tenant_id=None,
        idempotency_key=idempotency_key,
        coalesce_key=None,
        delay=None,
        available_at=available_at,
        queue=queue,
        priority=priority,
        parent_run_id=None,
        retry=retry,
        deadline=None,
    )


def trace_context_json(carrier: dict[str, str] | None) -> str | None:
    """A trace context as the run stores it (jsonb), or None."""
    return None if carrier is None else json.dumps(carrier)


def with_engine_key(params: dict[str, Any], key: str) -> dict[str, Any]:
    """``params`` keyed by an engine-made key (reserved prefix), scoped to the run's tenant."""
    return {**params, "idempotency_key": scope_engine_key(key, params["tenant_id"])}


def _params(
    name: str,
    input: object,
    version: int | None,
    *,
    tenant_id: object,
    idempotency_key: str | None,
    coalesce_key: str | None,
    delay: timedelta | float | None,
    available_at: datetime | None,
    queue: str,
    priority: int,
    parent_run_id: str | None,
    retry: RetryPolicy | None,
    deadline: datetime | timedelta | float | None,
) -> dict[str, Any]:
    tenant = normalize_tenant(tenant_id)
    delay_seconds = seconds(delay, what="delay")
    when = instant(available_at, what="available_at")
    if delay_seconds is not None and when is not None:
        raise InvalidInput("give either delay or available_at, not both")
    storable.name(queue, what="queue")
    integer(priority, what="priority", minimum=MIN_PRIORITY, maximum=MAX_PRIORITY)
    policy = retry or _default_policy()
    return {
        **_NO_LIMITS,
        "debounce_key": None,
        "debounce_max_wait": None,
        "run_id": inserts.new_run_id(),
        "name": name,
        "version": version,
        "idempotency_key": scope(idempotency_key, tenant, what="idempotency_key"),
        "coalesce_key": scope(coalesce_key, tenant, what="coalesce_key"),
        "input": json_text(input, what="input"),
        "tenant_id": tenant,
        "retry_policy": _policy_json(policy),
        "queue": queue,
        "priority": priority,
        "parent_run_id": parent_run_id,
        "delay": delay_seconds,
        "available_at": when,
        **deadline_params(deadline),
        # The caller's span, if it is traced: the run's attempts become its children.
        "trace_context": trace_context_json(tracing.current_context()),
    }


def _default_policy() -> RetryPolicy:
    """``DEFAULT_RETRY`` as a policy, validated once per value of the setting (it is read at each submit)."""
    configured = durable_settings.DEFAULT_RETRY
    try:
        # Typed: 3 and 3.0 are equal keys, but only one of them may be a valid max_attempts.
        return _policy_of(tuple((key, type(value), value) for key, value in sorted(configured.items())))
    except (AttributeError, TypeError):  # not a dict of hashable values: validated (and refused) each time
        return RetryPolicy.from_json(configured)


@functools.lru_cache(maxsize=16)
def _policy_of(items: tuple[tuple[str, type, Any], ...]) -> RetryPolicy:
    return RetryPolicy.from_json({key: value for key, _, value in items})


@functools.lru_cache(maxsize=128)
def _policy_json(policy: RetryPolicy) -> str:
    """A policy's JSON, made once per policy (a function's own, or the default): runs snapshot a few policies."""
    return json_text(policy.as_json(), what="retry policy")


def deadline_params(deadline: object) -> dict[str, Any]:
    """A run's deadline as the store takes it: an instant, or seconds from the database's now.

    Raises:
        InvalidInput: not an aware datetime, a timedelta or a number of seconds, or already past.
    """
    if deadline is None:
        return _NO_DEADLINE
    if isinstance(deadline, datetime):
        when = instant(deadline, what="deadline")
        if when is not None and when <= timezone.now():
            raise InvalidInput(f"deadline {deadline.isoformat()} has already passed")
        return {"deadline": when, "deadline_seconds": None}
    after = seconds(deadline, what="deadline")
    if after is not None and after <= 0:
        raise InvalidInput(f"deadline {deadline!r} has already passed: give a positive duration")
    return {"deadline": None, "deadline_seconds": after}


_NO_DEADLINE = {"deadline": None, "deadline_seconds": None}


def limit_params(limits: RunLimits) -> dict[str, Any]:
    return {
        "concurrency_key": limits.concurrency_key,
        "concurrency_limit": limits.concurrency_limit,
        "concurrency_while_waiting": limits.while_waiting,
        "rate_key": limits.rate_key,
        "rate_limit": limits.rate_limit,
        "rate_per": limits.rate_per,
    }


_NO_LIMITS = limit_params(RunLimits())

# How many times a submit inserts again when the run that refused its key has vanished by the time it is
# looked up (the coalesced run claimed, the keyed run purged).
JOIN_ATTEMPTS = 20


def insert_or_join(params: dict[str, Any]) -> Run:
    """Insert the run, or return the run its idempotency or coalesce key already names.

    A conflict that has vanished by the time we look (the coalesced run was
    claimed, the keyed run purged) simply inserts again. A debounced submit
    moves the unclaimed pending run of its key instead, last input winning.
    """
    if params["debounce_key"] is not None:
        return inserts.debounce(params)
    return insert_or_find(params)[0]


def insert_or_find(params: dict[str, Any]) -> tuple[Run, bool]:
    """Like ``insert_or_join`` without debounce: (the run, True if this call inserted it)."""
    for _ in range(JOIN_ATTEMPTS):
        run = inserts.insert_run(params)
        if run is not None:
            signalling.run_enqueued(run)
            return run, True
        if params["idempotency_key"] is not None:
            run = run_store.find_by_idempotency_key(params["idempotency_key"])
            if run is not None:
                return run, False
        if params["coalesce_key"] is not None:
            run = run_store.find_by_coalesce_key(params["coalesce_key"])
            if run is not None:
                return run, False
    # Only a caller whose snapshot hides the conflicting row (REPEATABLE READ) ends up here.
    raise InvalidInput("the run these keys name is not visible in this transaction; retry outside it")
