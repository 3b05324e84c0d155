"""Sessions of the store's own, outside Django's connections: LISTEN, waiting for a run to land, and readers' reads."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, TypeVar

import psycopg
from django.core.exceptions import ImproperlyConfigured
from django.db import connections

from ..conf import durable_settings
from . import pool
from .db import DONE_CHANNEL

_T = TypeVar("_T")


def session_connection_params(alias: str) -> dict[str, Any]:
    """psycopg.connect() arguments for a session of its own on ``alias``, preparing only where that is safe."""
    params = connections[alias].get_connection_params()
    for django_only in ("cursor_factory", "context", "prepare_threshold"):
        params.pop(django_only, None)
    if not durable_settings.prepares_statements(alias):
        params["prepare_threshold"] = None  # psycopg prepares a query it sees five times, by default
    return {**params, **pool.session_name()}


@contextmanager
def session(alias: str) -> Iterator[psycopg.Connection[tuple[Any, ...]]]:
    """A dedicated autocommit session on ``alias``, outside any transaction of the caller's."""
    with psycopg.connect(**session_connection_params(alias), autocommit=True) as conn:
        yield conn


@contextmanager
def listening(channels: Iterable[str]) -> Iterator[psycopg.Connection[tuple[Any, ...]]]:
    """A dedicated autocommit session that LISTENs on ``channels``; iterate ``conn.notifies()``.

    Raises:
        ImproperlyConfigured: the durable alias goes through a transaction pooler and no
            ``LISTEN_DATABASE`` bypasses it; callers poll instead (``durable_settings.listen_database``).
    """
    alias = durable_settings.listen_database
    if alias is None:
        raise ImproperlyConfigured(
            f"DURABLE['DATABASE'] {durable_settings.DATABASE!r} goes through a transaction pooler "
            "(DISABLE_SERVER_SIDE_CURSORS), where LISTEN is lost: set DURABLE['LISTEN_DATABASE'] "
            "to an alias that reaches PostgreSQL directly"
        )
    with session(alias) as conn:
        for channel in channels:
            conn.execute(f'LISTEN "{channel}"')
        yield conn


class LandingWatch:
    """Waits for a run to land: woken by the ``durable_done`` NOTIFY, or by polling where LISTEN is lost.

    ``session`` reads what is committed, outside the caller's transaction. Behind
    a transaction pooler with no ``LISTEN_DATABASE`` it polls, from every 50 ms
    up to every ``POLL_SECONDS``, so a short run is seen soon and a long wait
    costs little.
    """

    FIRST_POLL_SECONDS = 0.05

    def __init__(self, session: psycopg.Connection[tuple[Any, ...]], *, listening: bool) -> None:
        self.session = session
        self.listening = listening
        self._poll = self.FIRST_POLL_SECONDS

    def wait(self, run_id: str, timeout: float) -> None:
        """Return when ``run_id``'s landing is announced, at the next poll, or after ``timeout`` seconds."""
        if not self.listening:
            time.sleep(min(timeout, self._poll))
            self._poll = min(self._poll * 2, float(durable_settings.POLL_SECONDS))
            return
        for notify in self.session.notifies(timeout=timeout):
            if notify.payload == run_id:
                return


@contextmanager
def watching_landings() -> Iterator[LandingWatch]:
    """A session that hears landed runs announced (LISTEN subscribes before the caller reads), or polls."""
    if durable_settings.listen_database is None:
        with session(durable_settings.DATABASE) as conn:
            yield LandingWatch(conn, listening=False)
        return
    with listening([DONE_CHANNEL]) as conn:
        yield LandingWatch(conn, listening=True)


class ReadSessions:
    """At most ``size`` autocommit sessions on the durable alias, each kept by one thread of a small pool.

    Readers of events and streams read here, outside any caller's transaction,
    whatever the number of readers: a process holds ``size`` connections for
    them, not one per reader. A session that breaks is closed, and the read is
    tried once more on a fresh one.
    """

    def __init__(self, size: int) -> None:
        self._size = size
        self._lock = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None
        self._local = threading.local()
        self._sessions: list[psycopg.Connection[tuple[Any, ...]]] = []
        # Reads submitted with submit_shared() that no thread has begun, by (function, arguments).
        self._queued: dict[tuple[Any, ...], Future[Any]] = {}

    def submit(self, read: Callable[..., _T], *args: Any) -> Future[_T]:
        """Run ``read(session, *args)`` on one of the pool's threads; its future."""
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(max_workers=self._size, thread_name_prefix="durable-stream-read")
            return self._executor.submit(self._on_session, read, *args)

    def submit_shared(self, read: Callable[..., _T], *args: Any) -> Future[_T]:
        """``submit``, joining the same read (same function and arguments) while it waits for a thread.

        Many readers woken by one write ask for the same rows: those whose read
        has not begun get one answer. A read that has begun is never joined (its
        snapshot may be older than the joiner's subscription).
        """
        key = (read, args)
        with self._lock:
            queued = self._queued.get(key)
            if queued is not None:
                return queued
            if self._executor is None:
                self._executor = ThreadPoolExecutor(max_workers=self._size, thread_name_prefix="durable-stream-read")
            future = self._executor.submit(self._begin_shared, key, read, *args)
            self._queued[key] = future
            return future

    def _begin_shared(self, key: tuple[Any, ...], read: Callable[..., _T], *args: Any) -> _T:
        with self._lock:
            self._queued.pop(key, None)
        return self._on_session(read, *args)

    def close(self) -> None:
        """Close every session, once the reads under way are done; the next read opens the pool again."""
        with self._lock:
            executor, self._executor = self._executor, None
            self._local = threading.local()
        if executor is not None:
            executor.shutdown(wait=True)
        with self._lock:
            sessions, self._sessions = self._sessions, []
        for session in sessions:
            session.close()

    def _on_session(self, read: Callable[..., _T], *args: Any) -> _T:
        local = self._local
        for try_number in (1, 2):
            conn: psycopg.Connection[tuple[Any, ...]] | None = getattr(local, "conn", None)
            if conn is None or conn.closed:
                conn = psycopg.connect(**session_connection_params(durable_settings.DATABASE), autocommit=True)
                local.conn = conn
                with self._lock:
                    self._sessions.append(conn)
            try:
                return read(conn, *args)
            except (psycopg.OperationalError, psycopg.InterfaceError):
                conn.close()
                if try_number == 2:
                    raise
        raise AssertionError("unreachable")
