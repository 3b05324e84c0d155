"""The store's plumbing: which connection, JSON in and out, rows to records."""

from __future__ import annotations

import json
from contextlib import contextmanager

import psycopg

from django.db import connections

from ..conf import durable_settings
from ..exceptions import InvalidInput
from ..states import TERMINAL_STATUSES, RunStatus
from ..tenancy import unscope
from ..types import RetryPolicy, Run, Schedule

# Channels: one wakes workers (payload: the queue), one announces landed runs (payload: run id).
WAKE_CHANNEL = "durable_wake"
DONE_CHANNEL = "durable_done"

TERMINAL = tuple(sorted(TERMINAL_STATUSES))


def connection():
    """The Django connection of the alias the durable tables live on (per thread)."""
    return connections[durable_settings.DATABASE]


@contextmanager
def cursor():
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
    raw = conn.connection
    if raw.prepare_threshold is None and durable_settings.PREPARED_STATEMENTS:
        # Django disables preparation for the sake of connection poolers; only our
        # server-binding cursors prepare (Django's own client-binding cursors never do).
        raw.prepare_threshold = 0
    conn.validate_thread_sharing()
    with conn.make_cursor(psycopg.Cursor(raw)) as cur:
        yield cur


def to_json(value, *, what: str = "value") -> str:
    """Encode for a jsonb parameter; None becomes JSON null, not SQL NULL."""
    try:
        return json.dumps(value, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"{what} is not JSON-serialisable: {exc}") from exc


def from_json(text):
    return None if text is None else json.loads(text)


# Every read of a run selects these, in this order; jsonb comes back as text.
RUN_COLUMNS = (
    "run_id, name, version, status, input::text, output::text, error, attempts, tenant_id::text, "
    "idempotency_key, coalesce_key, parent_run_id, queue, priority, available_at, leased_until, "
    "created_at, updated_at, cancel_requested_at, cancel_refused_at, error_type, failures, recoveries, "
    "retry_policy::text, waiting_for, pivoted_at, started_at, finished_at, worker_id"
)
RUN_COLUMN_COUNT = RUN_COLUMNS.count(",") + 1


def qualified_run_columns(alias: str) -> str:
    return ", ".join(f"{alias}.{column.strip()}" for column in RUN_COLUMNS.split(","))


def row_to_run(row) -> Run:
    (run_id, name, version, status, input_, output, error, attempts, tenant_id, idempotency_key,
     coalesce_key, parent_run_id, queue, priority, available_at, leased_until, created_at, updated_at,
     cancel_requested_at, cancel_refused_at, error_type, failures, recoveries, retry_policy,
     waiting_for, pivoted_at, started_at, finished_at, worker_id) = row[:RUN_COLUMN_COUNT]
    return Run(
        run_id=run_id, name=name, version=version, status=RunStatus(status),
        input=from_json(input_), output=from_json(output), error=error, attempts=attempts,
        tenant_id=tenant_id, idempotency_key=unscope(idempotency_key), coalesce_key=unscope(coalesce_key),
        parent_run_id=parent_run_id, queue=queue, priority=priority, available_at=available_at,
        leased_until=leased_until, created_at=created_at, updated_at=updated_at,
        cancel_requested_at=cancel_requested_at, cancel_refused_at=cancel_refused_at,
        error_type=error_type, failures=failures, recoveries=recoveries,
        retry_policy=RetryPolicy.from_json(from_json(retry_policy)), waiting_for=waiting_for,
        pivoted_at=pivoted_at, started_at=started_at, finished_at=finished_at, worker_id=worker_id,
    )


SCHEDULE_COLUMNS = (
    "schedule_id, name, cron, tz, input::text, next_fire_at, enabled, tenant_id::text, created_at, updated_at"
)


def row_to_schedule(row) -> Schedule:
    (schedule_id, name, cron, tz, input_, next_fire_at, enabled, tenant_id, created_at, updated_at) = row[:10]
    return Schedule(
        schedule_id=unscope(schedule_id), name=name, cron=cron, tz=tz or "UTC", input=from_json(input_),
        next_fire_at=next_fire_at, enabled=enabled, tenant_id=tenant_id,
        created_at=created_at, updated_at=updated_at,
    )


def session_connection_params() -> dict:
    """psycopg.connect() arguments for a session of its own on the durable alias (LISTEN needs one)."""
    params = connection().get_connection_params()
    for django_only in ("cursor_factory", "context", "prepare_threshold"):
        params.pop(django_only, None)
    return params


@contextmanager
def listening(channels):
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
