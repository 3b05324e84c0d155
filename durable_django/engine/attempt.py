"""One attempt of a claimed run: its fence token, journal, state and time limits.

The attempt's own thread, the heartbeat, the claim loop's time limits and the
landing batcher share this object. Its life is one ``AttemptState``
(``engine/attempt_state.py``), moved under its lock along the allowed
transitions only, and it ends at one point, ``end``, which reports its outcome
once. A cancel or a lost lease moves it to a state that the next context call
raises; while user code runs, the attempt's thread is also interrupted (an
asynchronous exception for a sync handler, ``task.cancel()`` for an async
one), except inside a pivot step's ``fn``, where a requested cancel waits.

Two instants bound an attempt, both on this process's monotonic clock: its
function's timeout counted from when the handler began, and its run's
deadline (the database's instant, placed on the monotonic clock through the
database's time at the claim). A context call past the deadline raises
``DeadlineReached``; the worker ends an attempt that overstays either one.
"""

from __future__ import annotations

import asyncio
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
from .attempt_state import ALLOWED_TRANSITIONS, INTERRUPTED_IN, WRITES_NOTHING, AttemptState, Outcome
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
        # A pivot step is journalled (a fact of its run, not of its life): from here on a cancel is refused.
        self.pivoted = claimed.run.pivoted_at is not None
        # Every change of the state, and of what decides whether a stop interrupts, takes this lock;
        # a read of the state alone does not need it.
        self._lock = threading.Lock()
        self._state: AttemptState
        if not started:
            self._state = AttemptState.CLAIMED  # a run claimed ahead learns of a cancel when it starts
        elif claimed.run.cancel_requested_at is not None and not self.pivoted:
            self._state = AttemptState.CANCELLING
        else:
            self._state = AttemptState.RUNNING
        self._pivot_depth = 0
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
        passed without an answer, or once the attempt is lost, and raises
        ``LeaseLost``: a database outage never fails the attempt, the run is
        recovered once its lease expires. In a worker each try borrows one of
        the engine's connections (``store.pool``): a broken one is closed, and
        the next try opens another.
        """
        return self._send(write, args, kwargs, borrow=True)

    def persist_together(self, write: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs) -> _T:
        """``persist()`` for a write that other slots' writes of its kind join (``engine/batching.py``):
        its batch borrows the connection, once for them all."""
        return self._send(write, args, kwargs, borrow=False)

    def _send(self, write: Callable[..., _T], args: tuple[Any, ...], kwargs: dict[str, Any], *, borrow: bool) -> _T:
        """Call ``write(*args, **kwargs)`` (no partial made: every step's write comes through here)."""
        began = time.monotonic()
        backoff = 0.05
        while True:
            try:
                if not borrow:
                    return write(*args, **kwargs)
                with pool.borrowed():
                    return write(*args, **kwargs)
            except DatabaseError as exc:
                if not is_disconnect(exc):
                    raise
                if self.lost or time.monotonic() + backoff > began + durable_settings.LEASE_SECONDS:
                    # Raised into the handler, the error would fail the attempt for a database outage.
                    if self._give_up_lease(exc):
                        raise LeaseLost() from exc
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

    def _give_up_lease(self, exc: DatabaseError) -> bool:
        """A write stops trying to reach the database: its lease is treated as lost, as the heartbeat treats
        the leases it cannot renew, and the run is recovered once that lease expires. False where the
        attempt is not its thread's to give up (a time limit stopped it, it was landed cancelled, or it
        ended): the caller raises the error."""
        with self._lock:
            was_lost = self._state is AttemptState.LOST
            if not was_lost and not self._become(AttemptState.LOST):
                return False
        if not was_lost:  # the heartbeat that made it lost said so already
            logger.warning(
                "run %s: the database did not answer within a lease (%s); its lease is treated as lost",
                self.run.run_id,
                type(exc.__cause__ or exc).__name__,
                extra=telemetry.log_fields(self),
            )
        reset_connection()
        return True

    # -- its state ---------------------------------------------------------------

    @property
    def state(self) -> AttemptState:
        return self._state

    @property
    def started(self) -> bool:
        """The database knows this attempt started (its claim started it, or a slot did since)."""
        return self._state not in (AttemptState.CLAIMED, AttemptState.DROPPED)

    @property
    def lost(self) -> bool:
        """It writes nothing more: the run is no longer its (taken over, its lease given up, landed cancelled
        by the heartbeat, ended at a time limit), or it ended."""
        return self._state in WRITES_NOTHING

    @property
    def cancel_requested(self) -> bool:
        """A cancel was requested and no pivot step refused it: the attempt ends cancelled."""
        return self._state in (AttemptState.CANCELLING, AttemptState.CANCELLED)

    @property
    def overstayed(self) -> bool:
        """A time limit stopped it: the claim loop lands and reports it, its own thread neither."""
        return self._state in (AttemptState.OVERSTAYED, AttemptState.ENDED_AT_LIMIT)

    def _become(self, to: AttemptState) -> bool:
        """Move to ``to`` if ``ALLOWED_TRANSITIONS`` allows it from the state now, and a cancel only while no
        pivot step is journalled; returns whether it moved. Every change of state comes through here, and
        its caller holds the lock."""
        if to not in ALLOWED_TRANSITIONS[self._state] or (to is AttemptState.CANCELLING and self.pivoted):
            return False
        self._state = to
        return True

    def mark_started(self, *, cancel_requested: bool) -> bool:
        """A slot started this claimed attempt in the database (``cancel_requested``: a cancel waits for it).

        Returns:
            False if it was dropped meanwhile: no slot may run it.
        """
        with self._lock:
            return (cancel_requested and self._become(AttemptState.CANCELLING)) or self._become(AttemptState.RUNNING)

    def request_cancel(self) -> None:
        """A write's answer says a cancel was requested: the next context call outside a pivot step raises
        Cancelled. Refused once a pivot step is journalled, and once the handler returned."""
        with self._lock:
            self._become(AttemptState.CANCELLING)

    def mark_pivoted(self) -> None:
        """A pivot step is journalled: the run must carry on, so a cancel requested before it is refused."""
        with self._lock:
            self.pivoted = True
            if self._state is AttemptState.CANCELLING:
                self._become(AttemptState.RUNNING)

    def finish(self) -> None:
        """The handler returned: its completion wins over any cancel requested from now on."""
        with self._lock:
            self._become(AttemptState.RETURNED)
            self._thread.clear()

    def hand_over(self) -> None:
        """Its success goes to the worker's landing batcher, which ends it. A lease lost meanwhile leaves it
        lost: the landing's fence decides, as it would have for a landing of its own."""
        with self._lock:
            self._become(AttemptState.LANDING)

    def end(self, outcome: Outcome, *, at_limit: bool = False) -> bool:
        """The one point where an attempt ends: its outcome is reported (span, observers, signals), once.

        Its record in ``durable_attempt`` was written by the statement that landed it (the trigger
        ``durable_attempt_ended``), under the same fence. The claim loop ends an attempt a time limit
        stopped (``at_limit``); its own thread's end of it is refused then, as is every end after the first.

        Returns:
            Whether this call ended it.
        """
        with self._lock:
            if not self._become(AttemptState.ENDED_AT_LIMIT if at_limit else AttemptState.ENDED):
                return False
        telemetry.attempt_ended(self, outcome)
        return True

    def check(self) -> None:
        """Raise the stop this attempt owes, if any (called by every context method)."""
        state = self._state
        if state in WRITES_NOTHING:
            raise LeaseLost()
        if state is AttemptState.CANCELLING and self._pivot_depth == 0:
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
        """A time limit passed: the attempt is the claim loop's to land and end; its handler is stopped (an
        async one is cancelled).

        Returns:
            False when the handler had already returned (its landing wins, as a completion wins over a
            cancel), or the attempt ended: it is not the claim loop's.
        """
        with self._lock:
            if not self._become(AttemptState.OVERSTAYED):
                return False
            self._interrupt()
            return True

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
            if self._state is AttemptState.CANCELLING:
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

    def begin_cancel(self) -> bool:
        """The heartbeat is told of a requested cancel: True if it is to land the run cancelled now.

        False while a pivot step runs or after one (the cancel waits or is refused), and once the handler
        returned (its completion wins) or the attempt ended. A run claimed ahead moves nothing here: its
        start reads the cancel again.
        """
        with self._lock:
            if self._pivot_depth or self.pivoted or self._state not in _CANCELLABLE:
                return False
            self._become(AttemptState.CANCELLING)  # from running; the other states stay as they are
            return True

    def stop(self, *, lost: bool = False, cancelled: bool = False) -> None:
        """Stop the attempt: its lease is gone (``lost``), its run was landed cancelled (both), or a cancel was
        requested (``cancelled``). Its user code is interrupted, but by a requested cancel while a pivot step
        runs; a claimed attempt not started is dropped instead."""
        with self._lock:
            if self._state is AttemptState.CLAIMED:
                if lost:
                    self._become(AttemptState.DROPPED)
                return
            if lost:
                self._become(AttemptState.CANCELLED if cancelled else AttemptState.LOST)
            elif cancelled:
                self._become(AttemptState.CANCELLING)
            self._interrupt()

    def _interrupt(self) -> None:
        """Interrupt the handler's user code if its state says it must stop (the caller holds the lock)."""
        if self._state in INTERRUPTED_IN:
            exc: type[BaseException] = LeaseLost
        elif self._state is AttemptState.CANCELLING and not self._pivot_depth:
            exc = Cancelled
        else:
            return  # running on, returned (only its landing is left), or ended
        self._thread.interrupt(exc)


# Where a cancel the heartbeat is told of may be landed: not once the handler returned or the attempt ended.
_CANCELLABLE = frozenset(
    {AttemptState.CLAIMED, AttemptState.RUNNING, AttemptState.CANCELLING, AttemptState.LOST, AttemptState.OVERSTAYED}
)
