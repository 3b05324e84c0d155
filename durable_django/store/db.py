"""The store's plumbing: which connection, JSON in and out, rows to records."""

from __future__ import annotations

import functools
import json
import random
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, ParamSpec, TypeVar

import psycopg
from django.db import DatabaseError, InterfaceError, connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorWrapper

from ..conf import durable_settings
from ..states import TERMINAL_STATUSES, RunStatus
from ..tenancy import unscope
from ..types import RetryPolicy, Run, Schedule
from . import pool

# Channels: one wakes workers (payload: the queue), one announces landed runs (payload: run id).
WAKE_CHANNEL = "durable_wake"
DONE_CHANNEL = "durable_done"

TERMINAL = tuple(sorted(TERMINAL_STATUSES))

_P = ParamSpec("_P")
_T = TypeVar("_T")

# A row as a cursor returns it; the statement that read it says what each column holds.
Row = Sequence[Any]


def connection() -> BaseDatabaseWrapper:
    """The Django connection of the alias the durable tables live on (per thread)."""
    return connections[durable_settings.DATABASE]


@contextmanager
def cursor() -> Iterator[CursorWrapper]:
    """A cursor on Django's own connection (so it joins the caller's transaction) with server-side binding.

    The store's statements are few and fixed; binding parameters on the server
    lets PostgreSQL keep their plans (prepared statements), which halves the
    cost of the landing and claim statements. It goes through Django's cursor
    wrapper (error mapping, execute wrappers); while queries are logged, Django's own cursor is used.
    """
    conn = connection()
    if conn.queries_logged:
        # DEBUG or a test capturing queries: Django's own cursor records the SQL as sent.
        with conn.cursor() as cur:
            yield cur
        return
    conn.ensure_connection()
    raw: psycopg.Connection[Any] = conn.connection
    if raw.prepare_threshold is None and durable_settings.PREPARED_STATEMENTS:
        # Django disables preparation for the sake of connection poolers; only our
        # server-binding cursors prepare (Django's own client-binding cursors never do).
        raw.prepare_threshold = 0
    conn.validate_thread_sharing()
    # make_cursor() wraps the DB-API cursor it is given; django-stubs types its argument as a CursorWrapper.
    with conn.make_cursor(psycopg.Cursor(raw)) as cur:  # type: ignore[arg-type]
        yield cur


# SQLSTATEs a transaction may hit however well it orders its locks; it is simply run again.
RETRYABLE_SQLSTATES = frozenset({"40001", "40P01"})  # serialization_failure, deadlock_detected
TRANSACTION_ATTEMPTS = 8


def is_retryable(exc: BaseException) -> bool:
    """A serialization failure or a deadlock: the transaction was rolled back and may run again."""
    cause = exc.__cause__ if isinstance(exc, DatabaseError) else exc
    return getattr(cause, "sqlstate", None) in RETRYABLE_SQLSTATES


def is_disconnect(exc: BaseException) -> bool:
    """The database could not be reached (down, restarting, or the connection was cut), not a refusal.

    What was being written may or may not have committed; a fenced,
    first-value-wins write may simply be sent again once the database answers.
    """
    if not isinstance(exc, DatabaseError):
        return False
    cause = exc.__cause__
    if isinstance(cause, psycopg.InterfaceError):
        return True
    if not isinstance(cause, psycopg.OperationalError):
        return isinstance(exc, InterfaceError)
    # No SQLSTATE: the client lost the server. 08: connection exception. 57P0x: the server is
    # shutting down, crashed, or not yet accepting connections.
    sqlstate = cause.sqlstate
    return sqlstate is None or sqlstate.startswith("08") or sqlstate in {"57P01", "57P02", "57P03"}


def in_transaction(work: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs) -> _T:
    """Run ``work(*args, **kwargs)`` in a transaction of its own, again after a deadlock or serialization failure.

    Inside a caller's ``atomic()`` block the work joins that transaction (a
    savepoint) and is not retried: only the caller can run its whole
    transaction again.
    """
    conn = connection()
    if conn.in_atomic_block:
        with transaction.atomic(using=conn.alias):
            return work(*args, **kwargs)
    for attempt in range(1, TRANSACTION_ATTEMPTS + 1):
        try:
            with transaction.atomic(using=conn.alias):
                return work(*args, **kwargs)
        except DatabaseError as exc:
            if attempt == TRANSACTION_ATTEMPTS or not is_retryable(exc):
                raise
            time.sleep(random.uniform(0, 0.005 * 2**attempt))
    raise AssertionError("unreachable")


def from_json(text: str | None) -> Any:
    return None if text is None else json.loads(text)


# Every read of a run selects these, in this order; jsonb comes back as text.
RUN_COLUMNS = (
    "run_id, name, version, status, input::text, output::text, error, attempts, tenant_id::text, "
    "idempotency_key, coalesce_key, parent_run_id, queue, priority, available_at, leased_until, "
    "created_at, updated_at, cancel_requested_at, cancel_refused_at, error_type, failures, recoveries, "
    "retry_policy::text, waiting_for, pivoted_at, started_at, finished_at, worker_id, attempt_started_at, "
    "held_by"
)
RUN_COLUMN_COUNT = RUN_COLUMNS.count(",") + 1


def qualified_run_columns(alias: str) -> str:
    return ", ".join(f"{alias}.{column.strip()}" for column in RUN_COLUMNS.split(","))


def row_to_run(row: Row) -> Run:
    (
        run_id,
        name,
        version,
        status,
        input_,
        output,
        error,
        attempts,
        tenant_id,
        idempotency_key,
        coalesce_key,
        parent_run_id,
        queue,
        priority,
        available_at,
        leased_until,
        created_at,
        updated_at,
        cancel_requested_at,
        cancel_refused_at,
        error_type,
        failures,
        recoveries,
        retry_policy,
        waiting_for,
        pivoted_at,
        started_at,
        finished_at,
        worker_id,
        attempt_started_at,
        held_by,
    ) = row[:RUN_COLUMN_COUNT]
    return Run(
        run_id=run_id,
        name=name,
        version=version,
        status=RunStatus(status),
        input=from_json(input_),
        output=from_json(output),
        error=error,
        attempts=attempts,
        tenant_id=tenant_id,
        idempotency_key=unscope(idempotency_key),
        coalesce_key=unscope(coalesce_key),
        parent_run_id=parent_run_id,
        queue=queue,
        priority=priority,
        available_at=available_at,
        leased_until=leased_until,
        created_at=created_at,
        updated_at=updated_at,
        cancel_requested_at=cancel_requested_at,
        cancel_refused_at=cancel_refused_at,
        error_type=error_type,
        failures=failures,
        recoveries=recoveries,
        retry_policy=_retry_policy(retry_policy),
        waiting_for=waiting_for,
        pivoted_at=pivoted_at,
        started_at=started_at,
        finished_at=finished_at,
        worker_id=worker_id,
        attempt_started_at=attempt_started_at,
        held_by=held_by,
    )


@functools.lru_cache(maxsize=128)
def _retry_policy(stored: str | None) -> RetryPolicy:
    """A run's retry policy from its stored JSON; parsed once per policy (a policy is immutable)."""
    return RetryPolicy.from_json(from_json(stored))


SCHEDULE_COLUMNS = (
    "schedule_id, name, cron, tz, input::text, next_fire_at, enabled, tenant_id::text, created_at, updated_at"
)


def row_to_schedule(row: Row) -> Schedule:
    (schedule_id, name, cron, tz, input_, next_fire_at, enabled, tenant_id, created_at, updated_at) = row[:10]
    return Schedule(
        schedule_id=unscope(schedule_id),
        name=name,
        cron=cron,
        tz=tz or "UTC",
        input=from_json(input_),
        next_fire_at=next_fire_at,
        enabled=enabled,
        tenant_id=tenant_id,
        created_at=created_at,
        updated_at=updated_at,
    )


def session_connection_params() -> dict[str, Any]:
    """psycopg.connect() arguments for a session of its own on the durable alias (LISTEN needs one)."""
    params = connection().get_connection_params()
    for django_only in ("cursor_factory", "context", "prepare_threshold"):
        params.pop(django_only, None)
    return {**params, **pool.session_name()}


@contextmanager
def listening(channels: Iterable[str]) -> Iterator[psycopg.Connection[tuple[Any, ...]]]:
    """A dedicated autocommit session that LISTENs on ``channels``; iterate ``conn.notifies()``."""
    import psycopg

    with psycopg.connect(**session_connection_params(), autocommit=True) as conn:
        for channel in channels:
            conn.execute(f'LISTEN "{channel}"')
        yield conn


def reset_connection() -> None:
    """Drop this thread's durable connection after an error so the next use reconnects."""
    conn = connection()
    try:
        if conn.in_atomic_block:
            return  # the atomic block's exit handles it
        conn.close()
    except Exception:  # noqa: BLE001 - a broken connection may fail to close; it is gone either way
        conn.connection = None
