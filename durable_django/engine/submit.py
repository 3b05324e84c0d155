"""Submitting runs: validation, key scoping, version choice and the retry snapshot."""

from __future__ import annotations

from ..conf import durable_settings
from ..exceptions import InvalidInput
from ..states import MAX_PRIORITY, MIN_PRIORITY
from ..registry import TASK_PATH_VERSION, registry, validate_name
from ..store import runs as run_store
from ..tenancy import normalize_tenant, scope
from ..types import RetryPolicy, Run
from .values import aware, json_text, seconds


def build(name, input=None, *, idempotency_key=None, coalesce_key=None, tenant_id=None, delay=None,
          available_at=None, version=None, queue="default", priority=0, parent_run_id=None,
          retry: RetryPolicy | None = None) -> dict:
    """Validate everything a submit names and return the store's insert parameters."""
    validate_name(name)
    tenant = normalize_tenant(tenant_id)
    if version is None:
        registration = registry.newest(name)
    elif version == TASK_PATH_VERSION:
        registration = None
    elif not isinstance(version, int) or isinstance(version, bool) or version < 0:
        raise InvalidInput(f"version must be a non-negative integer, got {version!r}")
    else:
        # A version no process here registers may still be run by another deploy's workers.
        registration = registry.get(name, version) if registry.knows(name) else None
        if registration is None and registry.knows(name):
            raise InvalidInput(f"unknown version {version} of {name!r}")
    delay_seconds = seconds(delay, what="delay")
    when = aware(available_at, what="available_at")
    if delay_seconds is not None and when is not None:
        raise InvalidInput("give either delay or available_at, not both")
    if not isinstance(queue, str) or not queue:
        raise InvalidInput(f"queue must be a non-empty string, got {queue!r}")
    if not isinstance(priority, int) or isinstance(priority, bool) or not MIN_PRIORITY <= priority <= MAX_PRIORITY:
        raise InvalidInput(f"priority must be an integer between {MIN_PRIORITY} and {MAX_PRIORITY}")
    policy = retry or (registration.retry if registration else None)
    if policy is None:
        policy = RetryPolicy.from_json(durable_settings.DEFAULT_RETRY)
    return {
        "run_id": run_store.new_run_id(),
        "name": name,
        "version": registration.version if registration else version,
        "idempotency_key": scope(idempotency_key, tenant, what="idempotency_key"),
        "coalesce_key": scope(coalesce_key, tenant, what="coalesce_key"),
        "input": json_text(input, what="input"),
        "tenant_id": tenant,
        "retry_policy": json_text(policy.as_json(), what="retry policy"),
        "queue": queue,
        "priority": priority,
        "parent_run_id": parent_run_id,
        "delay": delay_seconds,
        "available_at": when,
    }


_JOIN_ATTEMPTS = 20


def insert_or_join(params: dict) -> Run:
    """Insert the run, or return the run its idempotency or coalesce key already names.

    A conflict that has vanished by the time we look (the coalesced run was
    claimed, the keyed run purged) simply inserts again.
    """
    for _ in range(_JOIN_ATTEMPTS):
        run = run_store.insert_run(params)
        if run is not None:
            return run
        if params["idempotency_key"] is not None:
            run = run_store.find_by_idempotency_key(params["idempotency_key"])
            if run is not None:
                return run
        if params["coalesce_key"] is not None:
            run = run_store.find_by_coalesce_key(params["coalesce_key"])
            if run is not None:
                return run
    # Only a caller whose snapshot hides the conflicting row (REPEATABLE READ) ends up here.
    raise InvalidInput("the run these keys name is not visible in this transaction; retry outside it")
