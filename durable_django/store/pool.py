"""A worker process's engine connections: a few connections its threads take turns on.

Django gives every thread its own connection, so a worker whose engine wrote
through the thread it runs in would hold one connection per slot, and one per
helper thread. Instead the worker installs a pool (``installed``) of at most
``DURABLE["ENGINE_CONNECTIONS"]`` connections on the durable alias, and every
engine call (claims, starts, heartbeats, journal writes, suspensions, spawns,
landings, failures, the reconciler's and the scheduler's passes) borrows one
for its duration (``borrowed``). A handler's own ORM queries never see them:
they keep the thread's own connection, as Django gives it.

While a thread holds a borrowed connection, it *is* that thread's connection on
the durable alias (``connections[alias]``), so the store's statements run on it
unchanged: ``cursor()`` and its prepared statements, ``transaction.atomic`` and
``in_transaction``, the fenced writes, the "lock, then decide in the next
statement" landings. A transaction never outlives a borrow: it begins and ends
on the one connection. Borrows nest (a thread that holds one keeps it), so no
thread ever waits for a second connection while holding one, and the pool
cannot deadlock on itself. A connection goes back to the pool idle; one that
raised a database error, broke, or was left inside a transaction is closed, and
the next borrow opens a fresh one (which is how a write sent again across a
database restart reaches the new server).

Engine connections are plain connections kept for the life of the worker: the
alias's ``OPTIONS["pool"]`` (Django's connection pool, for the handlers' own
connections) is not used for them, and ``application_name`` names them
``durable_worker <worker id>`` in ``pg_stat_activity``, unless the alias's
``OPTIONS`` name its connections already (a deployment's own name wins).
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from types import TracebackType
from typing import Any

from django.db import DatabaseError, connections
from django.db.backends.base.base import BaseDatabaseWrapper
from psycopg.pq import TransactionStatus


class EnginePool:
    """At most ``size`` connections on ``alias``, opened when first needed and lent to one thread at a time.

    Args:
        alias: the database alias the durable tables live on.
        size: the most connections the pool holds at once (>= 1).
        application_name: what ``pg_stat_activity`` shows for them, unless the alias's OPTIONS name them.
    """

    def __init__(self, alias: str, size: int, application_name: str) -> None:
        if size < 1:
            raise ValueError(f"an engine pool needs at least one connection, not {size}")
        self.alias = alias
        self.size = size
        settings = connections[alias].settings_dict
        options = {key: value for key, value in settings["OPTIONS"].items() if key != "pool"}
        options.setdefault("application_name", application_name)
        self.application_name: str = options["application_name"]
        self._settings = {**settings, "OPTIONS": options}
        self._backend = type(connections[alias])
        self._lock = threading.Lock()
        self._idle: list[BaseDatabaseWrapper] = []
        self._waiting: collections.deque[_Waiter] = collections.deque()
        self._waiting_first: collections.deque[_Waiter] = collections.deque()
        self._made = 0
        self._closed = False
        self._held = threading.local()

    # -- lending ---------------------------------------------------------------

    def borrowed(self, *, first: bool = False) -> _Borrow:
        """A context in which this thread's connection on the alias is one of the pool's.

        Args:
            first: when every connection is lent, be served before the callers waiting without it
                (the claim loop and the heartbeat: a worker's throughput and its leases hang on them).
        """
        return _Borrow(self, first, install=True)

    def lent(self) -> _Borrow:
        """A context that gives one of the pool's connections (the one this thread holds, if it holds
        one) without making it the thread's connection on the alias: for a statement sent on it
        explicitly (``db.fetch_one(..., conn)``), which then skips two swaps of Django's connections."""
        return _Borrow(self, False, install=False)

    def _acquire(self, first: bool) -> BaseDatabaseWrapper:
        with self._lock:
            if self._idle:  # nobody waits while one is idle: a connection coming back goes to a waiter
                return self._idle.pop()  # the most recently used: the others may stay unopened
            if self._made < self.size:
                self._made += 1
                waiter = None
            else:
                waiter = _Waiter()
                (self._waiting_first if first else self._waiting).append(waiter)
        if waiter is not None:
            waiter.handed.acquire()  # until a connection coming back is handed to this waiter
            assert waiter.wrapper is not None
            return waiter.wrapper
        # The connection itself opens at its first statement (Django connects lazily).
        wrapper = self._backend(self._settings, self.alias)
        wrapper.inc_thread_sharing()  # it moves from thread to thread, one at a time
        return wrapper

    def _release(self, wrapper: BaseDatabaseWrapper, *, failed: bool) -> None:
        if failed or not _idle_outside_transactions(wrapper) or self._closed:
            _close(wrapper)
        with self._lock:
            # Handed straight to the longest waiter (a call that goes first before the others), so
            # a thread that did not wait cannot take it from under a waiter.
            queue = self._waiting_first or self._waiting
            if not queue:
                self._idle.append(wrapper)
                return
            waiter = queue.popleft()
        waiter.wrapper = wrapper
        waiter.handed.release()

    def close(self) -> None:
        """Close the idle connections; a lent one is closed when it comes back."""
        with self._lock:
            self._closed = True
            idle = list(self._idle)
        for wrapper in idle:
            _close(wrapper)


class _Waiter:
    """A thread waiting for a connection: ``handed`` is released once ``wrapper`` is its."""

    __slots__ = ("handed", "wrapper")

    def __init__(self) -> None:
        self.handed = threading.Lock()
        self.handed.acquire()
        self.wrapper: BaseDatabaseWrapper | None = None


class _Borrow:
    """Take one of the pool's connections for this thread (or keep the one it holds), and give it back;
    ``install``: make it the thread's connection on the alias meanwhile, and put the own one back."""

    __slots__ = ("_first", "_install", "_owner", "_pool", "_previous")

    def __init__(self, pool: EnginePool, first: bool, *, install: bool) -> None:
        self._pool = pool
        self._first = first
        self._install = install
        self._owner = False
        self._previous: BaseDatabaseWrapper | None = None

    def __enter__(self) -> BaseDatabaseWrapper:
        held = self._pool._held
        depth = getattr(held, "depth", 0)
        if depth:
            wrapper: BaseDatabaseWrapper = held.wrapper  # this thread holds one already: keep using it
        else:
            wrapper = held.wrapper = self._pool._acquire(self._first)
            held.installed = False
            self._owner = True
        held.depth = depth + 1
        if self._install and not held.installed:
            alias = self._pool.alias
            self._previous = connections[alias]
            connections[alias] = wrapper
            held.installed = True
        return wrapper

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        held = self._pool._held
        held.depth -= 1
        if self._previous is not None:
            connections[self._pool.alias] = self._previous
            self._previous = None
            held.installed = False
        if self._owner:
            self._owner = False
            wrapper, held.wrapper = held.wrapper, None
            self._pool._release(wrapper, failed=exc is not None and isinstance(exc, DatabaseError))


def _idle_outside_transactions(wrapper: BaseDatabaseWrapper) -> bool:
    """The connection is unopened, or open, healthy, in autocommit and outside any transaction."""
    raw: Any = wrapper.connection
    if raw is None:
        return True
    if wrapper.in_atomic_block or not wrapper.autocommit or raw.closed or raw.broken:
        return False
    return bool(raw.pgconn.transaction_status == TransactionStatus.IDLE)


def _close(wrapper: BaseDatabaseWrapper) -> None:
    try:
        wrapper.close()
    except Exception:  # noqa: BLE001 - a broken connection may fail to close; it is gone either way
        wrapper.connection = None


# The pool of this process's worker, while one runs.
_pool: EnginePool | None = None


@contextmanager
def installed(alias: str, size: int, application_name: str) -> Iterator[EnginePool]:
    """Route every ``borrowed()`` call of this process through a pool of ``size`` connections until exit."""
    global _pool
    if _pool is not None:
        raise RuntimeError("an engine pool is already installed in this process")
    pool = EnginePool(alias, size, application_name)
    _pool = pool
    try:
        yield pool
    finally:
        _pool = None
        pool.close()


_NOTHING = nullcontext()


def lending() -> bool:
    """Whether a worker's pool is installed in this process: engine calls borrow its connections."""
    return _pool is not None


def borrowed(*, first: bool = False) -> AbstractContextManager[BaseDatabaseWrapper | None]:
    """Borrow one of the installed pool's connections for the ``with`` block; without a pool, do nothing.

    ``first``: served before the other waiters when every connection is lent (see ``EnginePool.borrowed``).

    Without a pool (a web process, ``run_until_idle``, a test) the engine's
    statements run on the thread's own connection and join its transaction, as
    every call of the client API does.
    """
    pool = _pool
    return _NOTHING if pool is None else pool.borrowed(first=first)


def lent() -> AbstractContextManager[BaseDatabaseWrapper | None]:
    """``borrowed()`` for statements sent on the connection it gives (``EnginePool.lent``); without a
    pool it gives None: the thread's own connection."""
    pool = _pool
    return _NOTHING if pool is None else pool.lent()


def session_name() -> dict[str, str]:
    """``psycopg.connect()`` arguments naming a worker's own session (its LISTEN) as its pool's are named."""
    pool = _pool
    return {} if pool is None else {"application_name": pool.application_name}
