"""The store's plumbing: which connection, JSON in and out, rows to records."""

from __future__ import annotations

import dataclasses
import functools
import json
import random
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any, ParamSpec, TypeVar

import psycopg
from django.db import DatabaseError, DataError, InterfaceError, connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorWrapper
from psycopg.adapt import AdaptersMap
from psycopg.types.datetime import TimestamptzLoader

from ..conf import durable_settings
from ..states import TERMINAL_STATUSES, RunStatus
from ..tenancy import unscope
from ..types import RetryPolicy, Run, Schedule

# Channels: one wakes workers (payload: the queue), one announces landed runs (payload: run id).
WAKE_CHANNEL = "durable_wake"
DONE_CHANNEL = "durable_done"
# Readers of events and streams LISTEN here; every event and stream write, and every close, notifies it with
# the run id.
STREAM_CHANNEL = "durable_stream"

TERMINAL = tuple(sorted(TERMINAL_STATUSES))

_P = ParamSpec("_P")
_T = TypeVar("_T")

# A row as a cursor returns it; the statement that read it says what each column holds.
Row = Sequence[Any]

_TIMESTAMPTZ = psycopg.adapters.types["timestamptz"].oid


class StoreAdapting:
    """A psycopg cursor class's mixin: its parameters and results go through ``loading``, adapters shared by
    the store's cursors on one connection (the connection's own, but psycopg's ``timestamptz`` loader for
    Django's; see ``store_adapters``)."""

    __slots__ = ()
    _loading: AdaptersMap

    def __init__(self, connection: psycopg.Connection[Any], loading: AdaptersMap) -> None:
        super().__init__(connection)  # type: ignore[call-arg]  # the psycopg cursor class it is mixed into
        # The slot is the subclass's: two bases with slots of their own cannot be mixed.
        self._loading = loading  # type: ignore[misc]

    @property
    def adapters(self) -> AdaptersMap:
        return self._loading


class _StoreCursor(StoreAdapting, psycopg.Cursor[Any]):
    __slots__ = ("_loading",)


# Per connection: its adapters with psycopg's own timestamptz loader (see cursor()).
_LOADING: weakref.WeakKeyDictionary[psycopg.Connection[Any], AdaptersMap] = weakref.WeakKeyDictionary()


def store_adapters(raw: psycopg.Connection[Any], conn: BaseDatabaseWrapper) -> AdaptersMap | None:
    """``raw``'s adapters with psycopg's ``timestamptz`` loader, in C, where that gives what Django's loader
    gives (the session's time zone is the alias's); None where it does not."""
    if conn.timezone is None or raw.info.timezone != conn.timezone:
        return None
    loading = _LOADING.get(raw)
    if loading is None:
        loading = AdaptersMap(raw.adapters)
        loading.register_loader(_TIMESTAMPTZ, TimestamptzLoader)
        _LOADING[raw] = loading
    return loading


def _store_cursor(raw: psycopg.Connection[Any], conn: BaseDatabaseWrapper) -> psycopg.Cursor[Any]:
    """A cursor on ``raw`` that loads ``timestamptz`` in C when that gives what Django's loader gives."""
    loading = store_adapters(raw, conn)
    return psycopg.Cursor(raw) if loading is None else _StoreCursor(raw, loading)


def connection(alias: str | None = None) -> BaseDatabaseWrapper:
    """This thread's Django connection on ``alias``: by default the one the durable tables live on."""
    return connections[alias or durable_settings.DATABASE]


def cursor(alias: str | None = None) -> CursorWrapper:
    """A cursor on Django's own connection (so it joins the caller's transaction) with server-side binding,
    for a ``with`` block (it is closed at the end).

    The store's statements are few and fixed; binding parameters on the server
    lets PostgreSQL keep their plans (prepared statements), which halves the
    cost of the landing and claim statements. They are not prepared on an alias
    behind a transaction pooler (``durable_settings.prepares_statements``): a
    statement prepared in one server session is unknown in the next. It goes
    through Django's cursor wrapper (error mapping, execute wrappers); while
    queries are logged, Django's own cursor is used.

    Django reads a ``timestamptz`` in Python, so as to give it the alias's time
    zone; where the session's time zone is that one already (always, with
    ``USE_TZ``), psycopg's own loader gives the same aware datetime, in C, for
    a tenth of the cost: a run's row holds several.

    Args:
        alias: the alias to read from (``READ_DATABASE`` for operator views); the durable alias by default.
    """
    return cursor_on(connection(alias))


def cursor_on(conn: BaseDatabaseWrapper | None) -> CursorWrapper:
    """``cursor()`` on a given connection (None: this thread's durable connection)."""
    if conn is None:
        conn = connection()
    if conn.queries_logged:
        # DEBUG or a test capturing queries: Django's own cursor records the SQL as sent.
        return conn.cursor()
    raw = connected(conn)
    conn.validate_thread_sharing()
    # make_cursor() wraps the DB-API cursor it is given; django-stubs types its argument as a CursorWrapper.
    return conn.make_cursor(_store_cursor(raw, conn))  # type: ignore[arg-type]


def connected(conn: BaseDatabaseWrapper) -> psycopg.Connection[Any]:
    """The psycopg connection under ``conn``, opened if need be, preparing the store's statements where safe."""
    conn.ensure_connection()
    raw: psycopg.Connection[Any] = conn.connection
    if raw.prepare_threshold is None and durable_settings.prepares_statements(conn.alias):
        # Django disables preparation for the sake of connection poolers; only our
        # server-binding cursors prepare (Django's own client-binding cursors never do).
        raw.prepare_threshold = 0
    return raw


# Per Django connection: its psycopg connection and the store cursor kept on it (see fetch_one()).
_KEPT: weakref.WeakKeyDictionary[BaseDatabaseWrapper, tuple[psycopg.Connection[Any], psycopg.Cursor[Any]]] = (
    weakref.WeakKeyDictionary()
)


def fetch_one(sql: str, params: Any, conn: BaseDatabaseWrapper | None = None) -> Row | None:
    """Run one of the store's statements on ``conn`` (this thread's durable connection by default); its first row.

    What ``with cursor() as cur: cur.execute(...); cur.fetchone()`` does, for the
    statements every step and every enqueue sends: on a store cursor kept per
    connection (so psycopg keeps its adapters and its prepared statement at hand),
    with Django's checks and error mapping, and without its cursor wrapper.
    Where Django must see the statement (queries logged, execute wrappers
    installed) it goes through ``cursor()``'s wrapper instead.
    """
    if conn is None:
        conn = connections[durable_settings.DATABASE]
    raw = conn.connection
    kept = _KEPT.get(conn)
    if (
        kept is None
        or kept[0] is not raw
        or conn.queries_logged
        or conn.execute_wrappers
        or raw.info.timezone != conn.timezone
    ):
        with cursor_on(conn) as cur:
            cur.execute(sql, params)
            row: Row | None = cur.fetchone()
        _keep(conn)
        return row
    conn.validate_thread_sharing()
    conn.validate_no_broken_transaction()
    store_cursor = kept[1]
    with conn.wrap_database_errors:
        store_cursor.execute(sql, params)
        first: Row | None = store_cursor.fetchone()
    return first


def _keep(conn: BaseDatabaseWrapper) -> None:
    """Keep a store cursor on ``conn``'s open connection for the next fetch_one()."""
    raw = conn.connection
    if raw is not None and not raw.closed:
        _KEPT[conn] = (raw, _store_cursor(raw, conn))


# SQLSTATEs a transaction may hit however well it orders its locks; it is simply run again.
RETRYABLE_SQLSTATES = frozenset({"40001", "40P01"})  # serialization_failure, deadlock_detected
TRANSACTION_ATTEMPTS = 8


def is_retryable(exc: BaseException) -> bool:
    """A serialization failure or a deadlock: the transaction was rolled back and may run again."""
    cause = exc.__cause__ if isinstance(exc, DatabaseError) else exc
    return getattr(cause, "sqlstate", None) in RETRYABLE_SQLSTATES


def constraint_of(exc: BaseException) -> str | None:
    """The name of the constraint a Django IntegrityError (or psycopg error) reports, if any."""
    cause = exc.__cause__ if isinstance(exc, DatabaseError) else exc
    diag = getattr(cause, "diag", None)
    return getattr(diag, "constraint_name", None)


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


def refuses_value(exc: BaseException) -> bool:
    """The database, or the driver while encoding it, refused a value sent (its text, its size, its
    range), rather than the connection or the transaction failing: the write of that value will never
    succeed as it is."""
    if isinstance(exc, DataError) or (isinstance(exc, ValueError) and not isinstance(exc, DatabaseError)):
        return True  # UnicodeEncodeError (a lone surrogate) is a ValueError the driver raises before sending
    cause = exc.__cause__ if isinstance(exc, DatabaseError) else exc
    sqlstate = getattr(cause, "sqlstate", None) or ""
    return sqlstate.startswith(("22", "54"))  # data exception; program limit exceeded (an oversized row)


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


# jsonb's text (and json_text()'s) holds one JSON document with no whitespace around it: decoded as it
# stands, without json.loads()'s two whitespace scans, which cost a small value as much as its decoding.
_DECODE = json.JSONDecoder().raw_decode


def from_json(text: str | None) -> Any:
    """A JSON value as PostgreSQL's jsonb (or ``values.json_text``) wrote it, decoded; None for SQL NULL."""
    return None if text is None else _DECODE(text)[0]


class RecordColumns:
    """A record type's columns, read in the order of its fields: one list for the SELECT and for the mapping.

    jsonb (and a uuid) is selected as text; a field whose stored form is not its value has a decoder.
    """

    def __init__(self, record: type[Any], *, as_text: frozenset[str], decoders: dict[str, Callable[[Any], Any]]):
        self.record = record
        self.fields = tuple(field.name for field in dataclasses.fields(record))
        self.select = ", ".join(f"{name}::text" if name in as_text else name for name in self.fields)
        self.count = len(self.fields)
        self._decoders = tuple((self.fields.index(name), decode) for name, decode in decoders.items())

    def qualified(self, alias: str) -> str:
        """The SELECT list with each column qualified by a table alias."""
        return ", ".join(f"{alias}.{column.strip()}" for column in self.select.split(","))

    def record_of(self, row: Row) -> Any:
        """The record a row selecting these columns holds (columns after them are the caller's)."""
        values = list(row[: self.count])
        for position, decode in self._decoders:
            values[position] = decode(values[position])
        return self.record(**dict(zip(self.fields, values, strict=True)))


@functools.lru_cache(maxsize=256)
def retry_policy_of(stored: str | None) -> RetryPolicy:
    """A stored retry policy as a record; runs of one function share a handful of policies, so each is parsed once."""
    return RetryPolicy.from_json(from_json(stored))


_RUNS = RecordColumns(
    Run,
    as_text=frozenset({"input", "output", "tenant_id", "retry_policy", "progress", "trace_context", "forked_from"}),
    decoders={
        "status": RunStatus,
        "input": from_json,
        "output": from_json,
        "idempotency_key": unscope,
        "coalesce_key": unscope,
        "retry_policy": retry_policy_of,
        "progress": from_json,
        "trace_context": from_json,
        "forked_from": from_json,
    },
)
# Every read of a run selects these, in the order of Run's fields.
RUN_COLUMNS = _RUNS.select
RUN_COLUMN_COUNT = _RUNS.count
qualified_run_columns = _RUNS.qualified


def row_to_run(row: Row) -> Run:
    run: Run = _RUNS.record_of(row)
    return run


_SCHEDULES = RecordColumns(
    Schedule,
    as_text=frozenset({"input", "tenant_id"}),
    decoders={"schedule_id": unscope, "tz": lambda tz: tz or "UTC", "input": from_json},
)
SCHEDULE_COLUMNS = _SCHEDULES.select


def row_to_schedule(row: Row) -> Schedule:
    schedule: Schedule = _SCHEDULES.record_of(row)
    return schedule


def reset_connection() -> None:
    """Drop this thread's durable connection after an error so the next use reconnects."""
    conn = connection()
    try:
        if conn.in_atomic_block:
            return  # the atomic block's exit handles it
        conn.close()
    except Exception:  # noqa: BLE001 - a broken connection may fail to close; it is gone either way
        conn.connection = None
