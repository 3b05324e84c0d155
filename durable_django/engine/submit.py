"""Submitting runs: validation, key scoping, version choice, the retry snapshot, and the insert.

A submit is built once into a typed request (``durable_django.submission``) and
taken to the INSERT by :func:`submit`; every front door (enqueue, spawn, a schedule
tick, a fork, a retry, a Django Tasks run) goes this way.
"""

from __future__ import annotations

import functools
import json
from typing import Any

from .. import storable
from ..conf import durable_settings
from ..exceptions import InvalidInput
from ..flow_control import Debounce, RunLimits, run_limits
from ..registry import TASK_PATH_VERSION, Registration, registry, validate_name
from ..storable import json_text
from ..store import inserts
from ..store import runs as run_store
from ..submission import NO_LIMITS, RunOptions, RunTemplate, SubmitRequest
from ..tenancy import scope, scope_engine_key
from ..types import RetryPolicy, Run
from . import signalling, tracing

# Keys the engine makes for itself: a spawned child's and a schedule tick's. A caller's key
# may not start with these, or it could take (or pre-empt) a run the engine means to make.
RESERVED_KEY_PREFIXES = ("spawn:", "schedule:")


def request(
    name: str,
    input: object,
    options: RunOptions,
    *,
    idempotency_key: str | None = None,
    coalesce_key: str | None = None,
    debounce: Debounce | None = None,
    parent_run_id: str | None = None,
) -> SubmitRequest:
    """One run's submit, validated: the request :func:`submit` inserts.

    The function's limit keys are computed here, once, from the input, and stored on the run.

    Raises:
        InvalidInput: any bad value, a reserved key, keys that cannot be combined, or a limit's key
            callable that raised or returned no str; nothing is written.
        UnknownFunction: no function ``name`` is registered (and no version was given).
    """
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
        if options.delay is not None or options.available_at is not None:
            raise InvalidInput("debounce sets the start itself: give no delay or available_at")
        options = options.starting_after(debounce.delay_seconds)
    template, registration = run_template(name, options, parent_run_id=parent_run_id)
    encoded = json_text(input, what="input")
    tenant = options.tenant_id
    return SubmitRequest(
        template,
        inserts.new_run_id(),
        encoded,
        idempotency_key=scope(idempotency_key, tenant, what="idempotency_key"),
        coalesce_key=scope(coalesce_key, tenant, what="coalesce_key"),
        limits=limits_of(registration, name, encoded),
        debounce_key=None if debounce is None else scope_engine_key(f"{name}:{debounce.key}", tenant),
        debounce_max_wait=None if debounce is None else debounce.max_wait_seconds,
    )


def run_template(
    name: str, options: RunOptions, *, parent_run_id: str | None = None
) -> tuple[RunTemplate, Registration | None]:
    """What every run of a submit of function ``name`` shares, and the function's registration, if any.

    Raises:
        InvalidInput: a bad name, or version 0 (Django Tasks runs').
        UnknownFunction: no function ``name`` is registered (and no version was given).
    """
    validate_name(name)
    if options.version == TASK_PATH_VERSION:
        raise InvalidInput("version 0 is reserved for Django Tasks runs: enqueue those through the Tasks backend")
    registration: Registration | None
    if options.version is None:
        registration = registry.newest(name)
    elif registry.knows(name):
        registration = registry.get(name, options.version)
    else:
        # A version no process here registers may still be run by another deploy's workers.
        registration = None
    policy = options.retry or (registration.retry if registration else None) or _default_policy()
    template = RunTemplate(
        name,
        registration.version if registration else options.version,
        options,
        _policy_json(policy),
        parent_run_id=parent_run_id,
        # The caller's span, if it is traced: the run's attempts become its children.
        trace_context=trace_context_json(tracing.current_context()),
    )
    return template, registration


def limits_of(registration: Registration | None, name: str, encoded_input: str) -> RunLimits:
    """The run's limit keys, from its function's limits and its input (decoded, as the handler sees it)."""
    if registration is None or not (registration.concurrency or registration.rate_limit):
        return NO_LIMITS
    return run_limits(name, json.loads(encoded_input), registration.concurrency, registration.rate_limit)


def task_request(
    path: str, payload: object, options: RunOptions, *, idempotency_key: str | None = None
) -> SubmitRequest:
    """A Django Tasks run's submit: named by its task's import path, version 0, no limits."""
    template = RunTemplate(
        storable.name(path, what="task path"),
        TASK_PATH_VERSION,
        options,
        _policy_json(options.retry or _default_policy()),
        trace_context=trace_context_json(tracing.current_context()),
    )
    tenant = options.tenant_id
    return SubmitRequest(
        template,
        inserts.new_run_id(),
        json_text(payload, what="input"),
        idempotency_key=scope(idempotency_key, tenant, what="idempotency_key"),
    )


def unreserved(key: object, what: str) -> str:
    """A caller's key, refused when it starts with a prefix the engine keeps for its own keys."""
    if storable.name(key, what=what).startswith(RESERVED_KEY_PREFIXES):
        raise InvalidInput(
            f"{what} {key!r} starts with a prefix reserved for the engine's own keys "
            f"({', '.join(RESERVED_KEY_PREFIXES)})"
        )
    assert isinstance(key, str)  # storable.name() let it through
    return key


def trace_context_json(carrier: dict[str, str] | None) -> str | None:
    """A trace context as the run stores it (jsonb), or None."""
    return None if carrier is None else json.dumps(carrier)


def _default_policy() -> RetryPolicy:
    """``DEFAULT_RETRY`` as a policy, validated once per value of the setting (it is read at each submit)."""
    configured = durable_settings.DEFAULT_RETRY
    try:
        # Typed: 3 and 3.0 are equal keys, but only one of them may be a valid max_attempts.
        # A list made and turned into a tuple, not a generator's: every submit makes this key.
        return _policy_of(tuple([(key, type(value), value) for key, value in sorted(configured.items())]))
    except (AttributeError, TypeError):  # not a dict of hashable values: validated (and refused) each time
        return RetryPolicy.from_json(configured)


@functools.lru_cache(maxsize=16)
def _policy_of(items: tuple[tuple[str, type, Any], ...]) -> RetryPolicy:
    return RetryPolicy.from_json({key: value for key, _, value in items})


@functools.lru_cache(maxsize=128)
def _policy_json(policy: RetryPolicy) -> str:
    """A policy's JSON, made once per policy (a function's own, or the default): runs snapshot a few policies."""
    return json_text(policy.as_json(), what="retry policy")


# How many times a submit inserts again when the run that refused its key has vanished by the time it is
# looked up (the coalesced run claimed, the keyed run purged).
JOIN_ATTEMPTS = 20


def submit(submitted: SubmitRequest) -> Run:
    """Insert the run, or return the run its idempotency or coalesce key already names.

    A conflict that has vanished by the time we look (the coalesced run was
    claimed, the keyed run purged) simply inserts again. A debounced submit
    moves the unclaimed pending run of its key instead, last input winning.
    """
    if submitted.debounce_key is not None:
        return inserts.debounce(submitted)
    return submit_or_find(submitted)[0]


def submit_or_find(submitted: SubmitRequest) -> tuple[Run, bool]:
    """Like :func:`submit` without debounce: (the run, True if this call inserted it)."""
    for _ in range(JOIN_ATTEMPTS):
        run = inserts.insert_run(submitted)
        if run is not None:
            signalling.run_enqueued(run)
            return run, True
        if submitted.idempotency_key is not None:
            run = run_store.find_by_idempotency_key(submitted.idempotency_key)
            if run is not None:
                return run, False
        if submitted.coalesce_key is not None:
            run = run_store.find_by_coalesce_key(submitted.coalesce_key)
            if run is not None:
                return run, False
    # Only a caller whose snapshot hides the conflicting row (REPEATABLE READ) ends up here.
    raise InvalidInput("the run these keys name is not visible in this transaction; retry outside it")
