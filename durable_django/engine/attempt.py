"""One attempt of a claimed run: its fence token, journal, stop flags and time limits.

The heartbeat thread and the attempt's own thread share this object. A cancel
or a lost lease sets a flag that the next context call raises; while user code
runs, the attempt's thread is also interrupted (an asynchronous exception for
a sync handler, ``task.cancel()`` for an async one), except inside a pivot
step's ``fn``, where a requested cancel waits.

Two instants bound an attempt, both on this process's monotonic clock: its
function's timeout counted from when the handler began, and its run's
deadline (the database's instant, placed on the monotonic clock through the
database's time at the claim). A context call past the deadline raises
``DeadlineReached``; the worker ends an attempt that overstays either one.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from django.db import DatabaseError

from ..conf import durable_settings
from ..exceptions import Cancelled, DeadlineReached, LeaseLost
from ..store import pool
from ..store.db import is_disconnect, reset_connection
from ..types import ClaimedRun
from . import telemetry
from .interruption import HandlerThread
from .replay import ReplayWatch

if TYPE_CHECKING:
    from opentelemetry.trace import Span

logger = logging.getLogger("durable_django.worker")

_P = ParamSpec("_P")
_T = TypeVar("_T")


class Attempt:
    def __init__(
        self,
        claimed: ClaimedRun,
        database_now: datetime,
        *,
        started: bool = True,
        due_since: datetime | None = None,
        previous_attempt_started_at: datetime | None = None,
    ) -> None:
        self.run = claimed.run
        self.token = claimed.token
        self.journal = claimed.journal
        # Which of the claimed journal's entries this attempt has asked for (divergence, ctx.patched).
        self.replay = ReplayWatch(claimed.journal, claimed.run.version)
        self.recovered = claimed.recovered
        # The database knows this attempt started (its claim started it, or a slot did since).
        self.started = started
        # The database clock at claim time: sleeps compare deadlines against it.
        self.database_now = database_now
        # When the run became claimable, by the database clock (its queue lag ends at database_now).
        self.due_since = due_since
        # Reclaimed after its holder's lease expired: when that holder's attempt had started (database clock).
        self.previous_attempt_started_at = previous_attempt_started_at
        # What telemetry keeps while the attempt runs: its span, when it began, and the error that failed it.
        self.span: Span | None = None
        self.began = 0.0
        self.error: BaseException | None = None
        # The heartbeat landed the run cancelled, which stopped this attempt.
        self.landed_cancelled = False
        # A pivot step is journalled: from here on a cancel is refused, never obeyed.
        self.pivoted = claimed.run.pivoted_at is not None
        self.cancel_requested = claimed.run.cancel_requested_at is not None and not self.pivoted
        self.lost = False
        self._pivot_depth = 0
        self._finished = False
        self._lock = threading.Lock()
        # Where the handler runs, for a stop to interrupt it; guarded by the same lock.
        self._thread = HandlerThread(self._lock)
        # Time limits, on the monotonic clock: the run's deadline, and the function's timeout once begun.
        claimed_at = time.monotonic()
        self.deadline_at = (
            None if claimed.run.deadline is None else claimed_at + (claimed.run.deadline - database_now).total_seconds()
        )
        # The function's timeout in seconds (None: none); set by whoever executes the attempt.
        self.timeout: float | None = None
        # When the handler was called (monotonic): the timeout counts from here.
        self.handler_began: float | None = None
        # The attempt overstayed a limit and was ended by the worker: its thread writes nothing more.
        self.overstayed = False
        # Its outcome was reported (telemetry): by its own thread, or by the worker that ended an overstay.
        self._reported = False

    @property
    def held(self) -> tuple[str, int]:
        """(run_id, token): what identifies this claim, in the database and in a worker's books."""
        return self.run.run_id, self.token

    def persist(self, write: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs) -> _T:
        """Make one fenced write of this attempt, sending it again while the database cannot be reached.

        A step whose function returned keeps its value through a database
        restart: the token is unchanged, so the write lands as it would have,
        unless the run was taken over meanwhile (the fence refuses it, or the
        heartbeat marks this attempt lost). It stops trying once a lease has
        passed without an answer. In a worker each try borrows one of the
        engine's connections (``store.pool``): a broken one is closed, and the
        next try opens another.
        """
        return self._send(functools.partial(write, *args, **kwargs), borrow=True)

    def persist_together(self, write: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs) -> _T:
        """``persist()`` for a write that other slots' writes of its kind join (``engine/batching.py``):
        its batch borrows the connection, once for them all."""
        return self._send(functools.partial(write, *args, **kwargs), borrow=False)

    def _send(self, write: Callable[[], _T], *, borrow: bool) -> _T:
        began = time.monotonic()
        backoff = 0.05
        while True:
            try:
                if not borrow:
                    return write()
                with pool.borrowed():
                    return write()
            except DatabaseError as exc:
                give_up = began + durable_settings.LEASE_SECONDS
                if not is_disconnect(exc) or self.lost or time.monotonic() + backoff > give_up:
                    raise
                level = logging.WARNING if backoff == 0.05 else logging.DEBUG
                logger.log(
                    level,
                    "run %s: the database cannot be reached (%s); keeping the write to send again",
                    self.run.run_id,
                    type(exc.__cause__ or exc).__name__,
                    extra=telemetry.log_fields(self),
                )
                reset_connection()
                time.sleep(backoff)
                backoff = min(backoff * 2, 2.0)
            if self.lost:
                raise LeaseLost()

    def check(self) -> None:
        """Raise the stop this attempt owes, if any (called by every context method)."""
        if self.lost:
            raise LeaseLost()
        if self.cancel_requested and not self.pivoted and self._pivot_depth == 0:
            raise Cancelled()
        if self.past_deadline():
            raise DeadlineReached()

    # -- time limits ------------------------------------------------------------

    def begin(self) -> None:
        """The handler is about to be called: its timeout counts from now."""
        self.handler_began = time.monotonic()

    def outlived_timeout_before(self) -> bool:
        """The attempt this one reclaims had started longer than the function's timeout before the claim,
        by the database clock, and its holder never landed it: that attempt timed out."""
        if not self.recovered or self.timeout is None or self.previous_attempt_started_at is None:
            return False
        return (self.database_now - self.previous_attempt_started_at).total_seconds() >= self.timeout

    def past_deadline(self) -> bool:
        return self.deadline_at is not None and time.monotonic() >= self.deadline_at

    def timeout_at(self) -> float | None:
        """When the function's timeout ends this attempt (monotonic), if it has one and has begun."""
        if self.timeout is None or self.handler_began is None:
            return None
        return self.handler_began + self.timeout

    def overstay_at(self) -> float | None:
        """The first instant (monotonic) at which a time limit ends this attempt, if any."""
        limits = [at for at in (self.timeout_at(), self.deadline_at) if at is not None]
        return min(limits) if limits else None

    def overstay(self) -> bool:
        """A time limit passed: flag the attempt lost and stop its handler (an async one is cancelled).

        Returns:
            False when the handler had already returned: its landing wins, as a completion wins over a cancel.
        """
        with self._lock:
            if self._finished:
                return False
            self.overstayed = True
        self.stop(lost=True)
        return True

    def first_report(self) -> bool:
        """True once only: whoever ends the attempt first reports its outcome (a stuck thread may never)."""
        with self._lock:
            first, self._reported = not self._reported, True
            return first

    def where(self) -> str:
        """The handler thread's stack as it is now (where a stuck handler is stuck), or ""."""
        return self._thread.where()

    # -- user code boundaries -------------------------------------------------

    def user_code(self) -> AbstractContextManager[None]:
        """Mark a stretch of user code that a stop may interrupt."""
        return self._thread.user_code()

    def engine_code(self) -> AbstractContextManager[None]:
        """Mark engine code inside a handler (context methods) that must not be interrupted."""
        return self._thread.engine_code()

    @contextmanager
    def pivot(self) -> Iterator[None]:
        """Run a pivot step's fn: checked and entered under the lock, so a cancel lands before or waits."""
        with self._lock:
            if self.lost:
                raise LeaseLost()
            if self.cancel_requested and not self.pivoted:
                raise Cancelled()
            self._pivot_depth += 1
        try:
            yield
        finally:
            with self._lock:
                self._pivot_depth -= 1

    def bind_async(self, loop: asyncio.AbstractEventLoop | None, task: asyncio.Task[Any] | None) -> None:
        """Route stops to an async handler's task (None, None once its event loop is gone)."""
        self._thread.bind_async(loop, task)

    # -- stops, from the heartbeat thread ------------------------------------

    def finish(self) -> None:
        """The handler returned: its completion wins over any cancel requested from now on."""
        with self._lock:
            self._finished = True
            self._thread.clear()

    def begin_cancel(self) -> bool:
        """Flag a requested cancel; False while a pivot step runs or after one (the cancel waits or is
        refused), and once the handler returned (its completion wins)."""
        with self._lock:
            if self._pivot_depth or self.pivoted or self._finished:
                return False
            self.cancel_requested = True
            return True

    def stop(self, *, lost: bool = False, cancelled: bool = False) -> None:
        with self._lock:
            self.lost = self.lost or lost
            self.cancel_requested = self.cancel_requested or cancelled
            if self._finished:
                return  # the handler returned; only its landing is left
            if not lost and (self._pivot_depth or self.pivoted):
                return  # a requested cancel waits while a pivot step runs
            self._thread.interrupt(LeaseLost if lost else Cancelled)
