"""The ``ctx`` handed to durable functions: replay-or-record steps, sleeps, waits and children.

Every method first raises the stop the attempt owes (cancel, lost lease,
earlier suspension). A journalled value is returned without calling anything;
otherwise the work is done and journalled under the claim's fence token.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, ParamSpec, TypeVar

from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper

from .. import faults, storable
from ..conf import durable_settings
from ..exceptions import Cancelled, InvalidInput, StepResultNotSerializable, Suspended
from ..journal_ids import StepId
from ..storable import instant, integer, json_text, seconds
from ..store import journal as journal_store
from ..store import progress as progress_store
from ..store import waits as wait_store
from ..store.db import refuses_value
from . import batching, publishing, replay, telemetry
from .attempt import Attempt
from .child_calls import ChildCalls
from .run_facts import RunFacts

# The most a run's progress may hold: its JSON text, in bytes (UTF-8).
MAX_PROGRESS_BYTES = 64 * 1024

_P = ParamSpec("_P")
_T = TypeVar("_T")


class Context(RunFacts, publishing.PublishingCalls, ChildCalls):
    """The context of one attempt of a synchronous durable function.

    Args:
        attempt: the attempt this context belongs to.
        connection: the connection on the durable alias of the thread the handler runs on (a sync
            handler's), as the handler is called: a context call made inside an ``atomic()`` block the
            handler opens on it is refused (see ``_enter``). None: the calling thread's, looked up at
            each call, with no block open at the start.
    """

    def __init__(self, attempt: Attempt, *, connection: BaseDatabaseWrapper | None = None) -> None:
        self._attempt = attempt
        self._run = attempt.run
        self._connection = connection
        self._atomic_depth = 0 if connection is None else len(connection.atomic_blocks)
        self.suspended = False
        self._publisher = publishing.Publisher(attempt)
        self.in_steps = 0

    # -- steps -------------------------------------------------------------

    def _enter(self, name: object, occurrence: object) -> str:
        """Raise the stop this attempt owes, refuse a call from inside the handler's own transaction,
        and return the call's step id."""
        self._check()
        sid = StepId.encode(self._run.version, name, occurrence)
        self._outside_handler_transaction(sid)
        self._attempt.replay.asked(sid)
        return sid

    def _check(self) -> None:
        """Raise the stop this attempt owes (cancel, lost lease, earlier suspension)."""
        if self.suspended:
            raise Suspended()
        self._attempt.check()

    def _outside_handler_transaction(self, call: str) -> None:
        """Refuse a context call (a step's id, or the call's name) made inside the handler's own transaction."""
        conn = self._connection or connections[durable_settings.DATABASE]
        if len(conn.atomic_blocks) > self._atomic_depth:
            # The journal write would join the handler's transaction: a suspension could roll
            # back its own record, and a step's value could vanish with the handler's rollback.
            named = call if call.startswith("ctx.") else f"ctx.{StepId.parse(call).name!r}"
            raise InvalidInput(
                f"{named} was called inside a transaction.atomic() block the handler opened: durable "
                "context calls write their own transactions; call them outside the block"
            )

    def _record(self, sid: str, name: str, value: object, pivot: bool, duration: float | None = None) -> Any:
        try:
            encoded = json_text(value, what="step result")
        except InvalidInput as exc:
            raise StepResultNotSerializable(
                f"step {name!r} of {self._run.name} returned a value that cannot be stored: {exc}",
                step=name,
                run_id=self._run.run_id,
            ) from None
        attempt = self._attempt
        try:
            if pivot:
                recorded = attempt.persist(
                    journal_store.record_step,
                    self._run.run_id,
                    attempt.token,
                    sid,
                    encoded,
                    pivot=True,
                    duration=duration,
                )
                attempt.mark_pivoted()
            else:  # journalled together with the steps other slots record at the same time
                recorded = attempt.persist_together(
                    batching.record_step, self._run.run_id, attempt.token, sid, encoded, duration
                )
        except Exception as exc:
            if not refuses_value(exc):
                raise
            raise StepResultNotSerializable(
                f"step {name!r} of {self._run.name} returned a value the database refused: {exc}",
                step=name,
                run_id=self._run.run_id,
            ) from exc
        if recorded.cancel_requested:
            attempt.request_cancel()
        attempt.journal[sid] = recorded.value
        return recorded.value

    def step(self, name: str, fn: Callable[[], object], *, occurrence: int = 0, pivot: bool = False) -> Any:
        """Return the journalled value of (name, occurrence), or call ``fn`` and journal its result.

        A pivot step holds back a requested cancel from before ``fn`` runs until its
        value is journalled: once it ran, the run must carry on. Only ``fn`` runs as
        user code (a stop may interrupt it); the rest is the engine's.
        """
        attempt = self._attempt
        with attempt.engine_code():
            sid = self._enter(name, occurrence)
            journal = attempt.journal
            if sid in journal:
                telemetry.step_replayed(attempt, name)
                return journal[sid]
            replay.check_before_executing(attempt, sid)
            with telemetry.step(attempt, name, occurrence):
                if pivot:
                    with attempt.pivot():
                        return self._execute_step(sid, name, fn, pivot=True)
                return self._execute_step(sid, name, fn, pivot=False)

    def _execute_step(self, sid: str, name: str, fn: Callable[[], object], *, pivot: bool) -> Any:
        """Run a step's ``fn`` as user code and journal its value."""
        began = time.monotonic()
        # fn counts as inside a step (``in_steps``) while it runs: a plain counter, not a context manager
        # made at every step.
        with self._attempt.user_code():
            self.in_steps += 1
            try:
                value = fn()
            finally:
                self.in_steps -= 1
        duration = time.monotonic() - began
        faults.reach("step.returned")
        return self._record(sid, name, value, pivot, duration)

    def patched(self, patch_id: str) -> bool:
        """Whether this run takes the patched path at this point: journalled, so a replay answers the same.

        True for a run that reaches this point for the first time on code that has the patch; False
        for one whose journal shows it passed this point before the patch (it holds entries that
        this attempt has not reached yet).

        Raises:
            InvalidInput: the patch id is not a non-empty string PostgreSQL can store.
        """
        with self._attempt.engine_code():
            return self._patched(patch_id)

    def _patched(self, patch_id: str) -> bool:
        attempt = self._attempt
        name = replay.patch_step_name(storable.name(patch_id, what="patch_id"))
        sid = self._enter(name, 0)
        if sid in attempt.journal:
            return bool(attempt.journal[sid])
        answer = bool(self._record(sid, name, not attempt.replay.replaying, pivot=False))
        faults.reach("patch.recorded")
        return answer

    def deprecated_patch(self, patch_id: str) -> None:
        """Mark the end of a patch's migration: every live run takes the patched path, which is now the code.

        Runs that journalled the patch's answer replay without a divergence; nothing new is journalled.
        Remove the call once no run that started before it was deployed is live.
        """
        with self._attempt.engine_code():
            self._enter(replay.patch_step_name(storable.name(patch_id, what="patch_id")), 0)

    def set_progress(self, value: object) -> None:
        """Store ``value`` (JSON, at most 64 KiB) as the run's progress: written at once, fenced, not journalled.

        The latest write wins and it is kept across attempts; a replay does not
        return it. Use it to show how far a run has got (``Run.progress``, the admin).

        Raises:
            InvalidInput: the value is not JSON, holds a NUL character, or is larger than 64 KiB.
        """
        with self._attempt.engine_code():
            self._check()
            encoded = json_text(value, what="progress")
            size = len(encoded.encode())
            if size > MAX_PROGRESS_BYTES:
                raise InvalidInput(
                    f"progress of run {self._run.run_id} is {size:,} bytes of JSON; at most {MAX_PROGRESS_BYTES:,} "
                    "are stored",
                    run_id=self._run.run_id,
                )
            self._outside_handler_transaction("ctx.set_progress()")
            try:
                cancel = self._attempt.persist(
                    progress_store.set_progress, self._run.run_id, self._attempt.token, encoded
                )
            except Exception as exc:
                if not refuses_value(exc):
                    raise
                raise InvalidInput(f"the database refused the progress of run {self._run.run_id}: {exc}") from exc
            if cancel:
                self._attempt.request_cancel()

    # -- suspensions -------------------------------------------------------

    def _resolve(self, sid: str, outcome: wait_store.WaitOutcome) -> Any:
        if outcome.cancel_requested:
            self._attempt.request_cancel()
            raise Cancelled()
        if outcome.suspended:
            self.suspended = True
            raise Suspended()
        self._attempt.journal[sid] = outcome.value
        return outcome.value

    def _sleep(self, name: str, occurrence: int, *, delay: float | None = None, until: datetime | None = None) -> None:
        with self._attempt.engine_code():
            sid = self._enter(name, occurrence)
            stored = self._attempt.journal.get(sid)
            if stored is not None and datetime.fromisoformat(stored["at"]) <= self._attempt.database_now:
                return None
            outcome = self._attempt.persist(
                wait_store.sleep, self._run.run_id, self._attempt.token, sid, seconds=delay, until=until
            )
            self._resolve(sid, outcome)
            return None

    def sleep_for(self, name: str, delay: timedelta | float, *, occurrence: int = 0) -> None:
        """Sleep ``delay`` (a timedelta or seconds) measured by PostgreSQL's clock, holding no worker."""
        return self._sleep(name, occurrence, delay=seconds(delay, what="delay", allow_none=False))

    def sleep_until(self, name: str, when: datetime, *, occurrence: int = 0) -> None:
        """Sleep until an aware datetime, holding no worker."""
        if when is None:
            raise InvalidInput("sleep_until needs a datetime")
        return self._sleep(name, occurrence, until=instant(when, what="when"))

    def wait_for_signal(
        self,
        name: str,
        signal: str,
        *,
        occurrence: int = 0,
        signal_occurrence: int = 0,
        timeout: timedelta | float | None = None,
        default: object = None,
    ) -> Any:
        """Return the value of signal (signal, signal_occurrence), or ``default`` after ``timeout``."""
        with self._attempt.engine_code():
            sid = self._enter(name, occurrence)
            if sid in self._attempt.journal:
                return self._attempt.journal[sid]
            storable.name(signal, what="a signal name")
            integer(signal_occurrence, what="signal_occurrence", minimum=0)
            json_text(default, what="default")
            outcome = self._attempt.persist(
                wait_store.wait_for_signal,
                self._run.run_id,
                self._attempt.token,
                sid,
                str(StepId.parse(sid).deadline_id()),
                signal=signal,
                occurrence=signal_occurrence,
                timeout_seconds=seconds(timeout, what="timeout"),
                default=default,
            )
            return self._resolve(sid, outcome)
