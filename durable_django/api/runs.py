"""Runs, as callers address them: submit, inspect, steer and wait for durable runs.

Every call that writes takes part in the caller's transaction on the
``DURABLE["DATABASE"]`` alias; its NOTIFY is delivered on commit.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from django.utils import timezone

from .. import storable
from ..engine import retention, run_control, submit, submit_many
from ..exceptions import InvalidInput, RunNotFound
from ..flow_control import Debounce
from ..states import CancelOutcome, RunStatus
from ..storable import integer, json_text, seconds
from ..store import runs as run_store
from ..store.sessions import watching_landings
from ..submission import RunOptions
from ..tenancy import normalize_tenant
from ..types import Run, RunPage


def enqueue(
    name: str,
    input: object = None,
    *,
    idempotency_key: str | None = None,
    coalesce_key: str | None = None,
    tenant_id: str | UUID | None = None,
    delay: timedelta | float | None = None,
    available_at: datetime | None = None,
    version: int | None = None,
    queue: str = "default",
    priority: int = 0,
    debounce: Debounce | None = None,
    deadline: datetime | timedelta | float | None = None,
) -> Run:
    """Submit a run of durable function ``name``.

    Args:
        name: the registered name of the function.
        input: any JSON-serialisable value, handed to the function.
        idempotency_key: every submit with this key (per tenant) returns one run, until it is purged.
        coalesce_key: a submit joins the unclaimed pending run with this key, if there is one.
        tenant_id: a UUID scoping the keys and the run.
        delay: a timedelta (or seconds) before the run may start; or give available_at.
        available_at: an aware datetime before which the run is not claimed.
        version: the function version; the newest registered one by default.
        queue: workers can be bound to queues.
        priority: -100..100; higher is claimed first.
        debounce: while an unclaimed pending run of the function with this key exists, this call
            replaces its input and moves its start instead of adding a run (see Debounce).
        deadline: an aware datetime, or a timedelta (or seconds) from now by PostgreSQL's clock: a run
            not finished by then ends failed with DeadlineExceeded, whatever it is doing, and its
            unfinished descendants are cancelled. It must not have passed already.

    Returns:
        The new run, or the existing run a key joined (the joiner's input, delay and priority are
        dropped), or the debounced run as this call left it.
    """
    options = RunOptions.of(
        tenant_id=tenant_id,
        delay=delay,
        available_at=available_at,
        version=version,
        queue=queue,
        priority=priority,
        deadline=deadline,
    )
    return submit.submit(
        submit.request(
            name, input, options, idempotency_key=idempotency_key, coalesce_key=coalesce_key, debounce=debounce
        )
    )


def enqueue_many(
    name: str,
    inputs: Iterable[object],
    *,
    idempotency_keys: Sequence[str] | None = None,
    coalesce_key: str | None = None,
    tenant_id: str | UUID | None = None,
    delay: timedelta | float | None = None,
    available_at: datetime | None = None,
    version: int | None = None,
    queue: str = "default",
    priority: int = 0,
    debounce: Debounce | None = None,
    deadline: datetime | timedelta | float | None = None,
) -> list[Run]:
    """Submit one run of durable function ``name`` per input, in one statement and one transaction.

    It takes part in the caller's transaction, like :func:`enqueue`, and wakes
    workers with one NOTIFY (per queue) at commit. Every input is checked before
    anything is written: a bad one anywhere writes nothing. The options are
    :func:`enqueue`'s, shared by every run.

    Args:
        inputs: a list of JSON-serialisable values, one per run.
        idempotency_keys: one key per input; a key that names a run joins it (as ``enqueue`` does),
            and a key repeated in the batch gives the same run at each of its positions.
        coalesce_key, debounce: refused: a batch neither coalesces nor debounces.

    Returns:
        The runs in input order (a joined run as it is, like ``enqueue``).

    Raises:
        InvalidInput: a bad input or option, keys that are not one per input, or coalesce_key or debounce.
        UnknownFunction: no function ``name`` is registered (and no version was given).
    """
    if coalesce_key is not None or debounce is not None:
        raise InvalidInput("a batch cannot coalesce or debounce: give neither coalesce_key nor debounce")
    options = RunOptions.of(
        tenant_id=tenant_id,
        delay=delay,
        available_at=available_at,
        version=version,
        queue=queue,
        priority=priority,
        deadline=deadline,
    )
    return submit_many.submit_batch(submit_many.batch_request(name, inputs, options, idempotency_keys=idempotency_keys))


def run_id_of(run_id: object) -> str:
    """A run id as callers pass it (a UUID or its text), validated."""
    if run_id is None:
        raise InvalidInput("invalid run id None")
    return storable.name(str(run_id), what="a run id")


def get_run(run_id: str | UUID, *, tenant_id: str | UUID | None = None) -> Run | None:
    """The run, or None if it does not exist or belongs to another tenant than ``tenant_id``."""
    return run_store.get_run(run_id_of(run_id), normalize_tenant(tenant_id))


def cancel(run_id: str | UUID, *, tenant_id: str | UUID | None = None) -> CancelOutcome:
    """Cancel a run and its descendants: CANCELLED, REQUESTED (it is running) or REFUSED.

    Raises:
        RunNotFound: no such run is visible to ``tenant_id``.
    """
    return run_control.cancel(run_id_of(run_id), normalize_tenant(tenant_id))


def emit_signal(
    run_id: str | UUID,
    signal: str,
    value: object = None,
    *,
    occurrence: int = 0,
    tenant_id: str | UUID | None = None,
) -> Any:
    """Deliver a signal to a run; the first committed value wins and is returned.

    Raises:
        RunNotFound: no such run is visible to ``tenant_id``.
    """
    storable.name(signal, what="a signal name")
    integer(occurrence, what="occurrence", minimum=0)
    value_json = json_text(value, what="signal value")
    return run_control.emit_signal(run_id_of(run_id), signal, occurrence, value_json, normalize_tenant(tenant_id))


def resume(run_id: str | UUID, *, version: int | None = None, tenant_id: str | UUID | None = None) -> Run:
    """Put a failed, cancelled or parked run back to pending, journal intact, with a fresh failure budget.

    Args:
        version: resume on this version of its function (its journal re-keyed to it, so the new code
            replays it); its own version by default.

    Raises:
        RunNotFound: no such run is visible to ``tenant_id``.
        InvalidInput: the run is live or succeeded, or it is a child whose parent has finished.
        UnknownFunction: nobody registers ``version``.
    """
    return run_control.resume(run_id_of(run_id), normalize_tenant(tenant_id), version=version)


def wait_for_result(
    run_id: str | UUID, *, timeout: timedelta | float | None = None, tenant_id: str | UUID | None = None
) -> Run:
    """Block until the run lands (succeeded, failed or cancelled) and return it.

    It LISTENs before it reads, on a connection of its own, so a landing between
    the two is never missed, and reads what is committed, as a worker sees it.
    Behind a transaction pooler with no ``DURABLE["LISTEN_DATABASE"]`` it polls
    instead, from every 50 ms up to every ``POLL_SECONDS``.

    Raises:
        RunNotFound: no such run is visible to ``tenant_id``.
        InvalidInput: the run was enqueued in the caller's transaction, which has not
            committed: no worker can see it, so waiting for it could never end.
        TimeoutError: the run had not landed within ``timeout``.
    """
    run_id, tenant = run_id_of(run_id), normalize_tenant(tenant_id)
    limit = seconds(timeout, what="timeout")
    deadline = None if limit is None else time.monotonic() + limit
    with watching_landings() as watch:
        while True:
            run = run_store.get_run_committed(watch.session, run_id, tenant)
            if run is None:
                if run_store.get_run(run_id, tenant) is not None:
                    raise InvalidInput(
                        f"run {run_id} was enqueued in this transaction, which has not committed: no worker can "
                        "see it; wait for it after the transaction commits",
                        run_id=run_id,
                    )
                raise RunNotFound(f"no run {run_id}", run_id=run_id)
            if not run.is_live:
                return run
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise TimeoutError(f"run {run_id} is still {run.status} after {limit}s")
            # Re-read when this run lands, and every few seconds as a fallback.
            watch.wait(run_id, 5.0 if remaining is None else min(remaining, 5.0))


def list_runs(
    *,
    status: str | None = None,
    name: str | None = None,
    tenant_id: str | UUID | None = None,
    limit: int = 50,
    cursor: str | None = None,
    input_contains: object = None,
) -> RunPage:
    """A page of runs, newest first; pass ``next_cursor`` back for the next page.

    Args:
        input_contains: only runs whose input contains this JSON value (PostgreSQL's jsonb ``@>``:
            ``{"customer": 42}`` finds every input with that key and value, among others), served by an index.
    """
    if status is not None and status not in RunStatus.values:
        raise InvalidInput(f"unknown status {status!r}")
    if name is not None:
        storable.name(name, what="name")
    integer(limit, what="limit", minimum=1, maximum=1000)
    after = run_store.decode_cursor(cursor) if cursor else None
    contains = None if input_contains is None else json_text(input_contains, what="input_contains")
    items, next_cursor = run_store.list_runs(
        input_contains=contains,
        status=status,
        name=name,
        tenant_id=normalize_tenant(tenant_id),
        limit=limit,
        after=after,
    )
    return RunPage(items=items, next_cursor=next_cursor)


def purge_finished(*, older_than: timedelta | float, batch_size: int = 1000) -> int:
    """Delete whole finished trees that landed more than ``older_than`` ago, oldest first.

    Returns:
        The number of runs deleted (their steps and signals go with them).
    """
    age = seconds(older_than, what="older_than", allow_none=False)
    integer(batch_size, what="batch_size", minimum=1)
    return retention.purge(timezone.now() - timedelta(seconds=age), batch_size)
