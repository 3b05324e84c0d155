"""The ``ctx`` handed to durable functions: replay-or-record steps, sleeps, waits and children.

Every method first raises the stop the attempt owes (cancel, lost lease,
earlier suspension). A journalled value is returned without calling anything;
otherwise the work is done and journalled under the claim's fence token.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any, ParamSpec, TypeVar, Unpack

from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper

from .. import faults, storable
from ..conf import durable_settings
from ..exceptions import Cancelled, InvalidInput, StepResultNotSerializable, Suspended
from ..journal_ids import StepId
from ..storable import instant, integer, json_text, seconds
from ..store import journal as journal_store
from ..store import progress as progress_store
from ..store import spawns as spawn_store
from ..store import waits as wait_store
from ..store.db import refuses_value
from ..submission import RunOptions
from ..types import ChildResult
from . import batching, publishing, replay, submit, submit_many, telemetry, tracing
from .attempt import Attempt
from .call_options import SpawnOptions
from .run_facts import RunFacts

_SPAWN_FORBIDDEN = ("idempotency_key", "idempotency_keys", "coalesce_key", "debounce", "tenant_id", "parent_run_id")

# The most a run's progress may hold: its JSON text, in bytes (UTF-8).
MAX_PROGRESS_BYTES = 64 * 1024

_P = ParamSpec("_P")
_T = TypeVar("_T")


def _child_ids(child_run_ids: object) -> list[str]:
    """The run ids a children wait is given, validated (a list of them, not one id)."""
    if isinstance(child_run_ids, (str, bytes)) or not isinstance(child_run_ids, Iterable):
        raise InvalidInput(f"child_run_ids must be a list of run ids, got {child_run_ids!r}")
    return [storable.name(str(child_id), what="a child run id") for child_id in child_run_ids]


def _refuse_spawn_keys(options: Mapping[str, object], call: str) -> None:
    forbidden = sorted(set(options) & set(_SPAWN_FORBIDDEN))
    if forbidden:
        raise InvalidInput(f"{call}() sets {', '.join(forbidden)} itself: the step identity keys the children")


class Context(RunFacts, publishing.PublishingCalls):
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
                attempt.pivoted = True
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
            attempt.cancel_requested = True
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
                        began = time.monotonic()
                        with attempt.user_code(), self._inside_step():
                            value = fn()
                        duration = time.monotonic() - began
                        faults.reach("step.returned")
                        return self._record(sid, name, value, pivot, duration)
                began = time.monotonic()
                with attempt.user_code(), self._inside_step():
                    value = fn()
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
                self._attempt.cancel_requested = True

    # -- suspensions -------------------------------------------------------

    def _resolve(self, sid: str, outcome: wait_store.WaitOutcome) -> Any:
        if outcome.cancel_requested:
            self._attempt.cancel_requested = True
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

    def spawn(
        self,
        name: str,
        function: str,
        input: object = None,
        *,
        occurrence: int = 0,
        **enqueue_options: Unpack[SpawnOptions],
    ) -> str:
        """Enqueue a child run (once, whatever the replays) and return its run id."""
        with self._attempt.engine_code():
            sid = self._enter(name, occurrence)
            if sid in self._attempt.journal:
                journalled_id: str = self._attempt.journal[sid]
                return journalled_id
            _refuse_spawn_keys(enqueue_options, "spawn")
            child = (
                submit.request(function, input, self._child_options(enqueue_options), parent_run_id=self._run.run_id)
                .with_engine_key(f"spawn:{self._run.run_id}:{sid}")
                # The child's spans join its parent's attempt span, whatever thread the handler runs on.
                .with_trace_context(submit.trace_context_json(tracing.context_for_children(self._attempt)))
            )
            child_id = self._attempt.persist(spawn_store.spawn, self._run.run_id, self._attempt.token, sid, child)
            self._attempt.journal[sid] = child_id
            return child_id

    def _child_options(self, enqueue_options: SpawnOptions) -> RunOptions:
        """A child's options: its parent's tenant, and what spawn was given."""
        return RunOptions.of(tenant_id=self._run.tenant_id, **enqueue_options)

    def spawn_many(
        self,
        name: str,
        function: str,
        inputs: Iterable[object],
        *,
        occurrence: int = 0,
        **enqueue_options: Unpack[SpawnOptions],
    ) -> list[str]:
        """Enqueue one child run per input as one step (once, whatever the replays); their run ids, in input order.

        Every child is inserted by one statement, with one NOTIFY, in the
        transaction that journals their ids: a crash before that commit leaves
        no child, and a replay returns the same children.
        """
        with self._attempt.engine_code():
            sid = self._enter(name, occurrence)
            if sid in self._attempt.journal:
                journalled: list[str] = self._attempt.journal[sid]
                return list(journalled)
            _refuse_spawn_keys(enqueue_options, "spawn_many")
            batch = submit_many.batch_request(
                function,
                inputs,
                self._child_options(enqueue_options),
                key_prefix=f"spawn:{self._run.run_id}:{sid}",
                parent_run_id=self._run.run_id,
            )
            if not batch.positions:
                return []
            # The children's spans join their parent's attempt span, as a spawned child's do.
            batch = batch.with_trace_context(submit.trace_context_json(tracing.context_for_children(self._attempt)))
            child_ids = self._attempt.persist(spawn_store.spawn_many, self._run.run_id, self._attempt.token, sid, batch)
            self._attempt.journal[sid] = child_ids
            return list(child_ids)

    def wait_for_all(
        self,
        name: str,
        child_run_ids: Iterable[str],
        *,
        occurrence: int = 0,
        timeout: timedelta | float | None = None,
    ) -> list[ChildResult]:
        """Wait, holding no worker, until every one of these direct children has landed; their results in order.

        The run is woken once, by the landing of the last of them. At the
        timeout the unfinished ones are cancelled (with their descendants) and
        reported as ``{"state": "timeout", "result": None, "error": None}``.
        """
        with self._attempt.engine_code():
            sid = self._enter(name, occurrence)
            if sid in self._attempt.journal:
                journalled: list[ChildResult] = self._attempt.journal[sid]
                return journalled
            ids = _child_ids(child_run_ids)
            if not ids:
                return []
            results: list[ChildResult] = self._wait_for_children(sid, ids, wait_all=True, timeout=timeout)
            return results

    def wait_for_any(
        self,
        name: str,
        child_run_ids: Iterable[str],
        *,
        occurrence: int = 0,
        timeout: timedelta | float | None = None,
    ) -> tuple[int, ChildResult] | None:
        """Wait, holding no worker, for the first of these direct children to land: ``(index, result)``.

        The others keep running. At the timeout it returns None (and cancels nothing).
        """
        with self._attempt.engine_code():
            sid = self._enter(name, occurrence)
            if sid in self._attempt.journal:
                value = self._attempt.journal[sid]
            else:
                ids = _child_ids(child_run_ids)
                if not ids:
                    raise InvalidInput("wait_for_any() needs at least one child run id")
                value = self._wait_for_children(sid, ids, wait_all=False, timeout=timeout)
            return None if value is None else (value[0], value[1])

    def _wait_for_children(
        self, sid: str, child_run_ids: list[str], *, wait_all: bool, timeout: timedelta | float | None
    ) -> Any:
        outcome = self._attempt.persist(
            wait_store.wait_for_children,
            self._run.run_id,
            self._attempt.token,
            sid,
            str(StepId.parse(sid).deadline_id()),
            child_run_ids=child_run_ids,
            wait_all=wait_all,
            timeout_seconds=seconds(timeout, what="timeout"),
        )
        return self._resolve(sid, outcome)

    def wait_for_result(
        self, name: str, child_run_id: str, *, occurrence: int = 0, timeout: timedelta | float | None = None
    ) -> ChildResult:
        """Wait for a direct child to land; returns {"state", "result", "error"}."""
        with self._attempt.engine_code():
            sid = self._enter(name, occurrence)
            if sid in self._attempt.journal:
                journalled: ChildResult = self._attempt.journal[sid]
                return journalled
            outcome = self._attempt.persist(
                wait_store.wait_for_child,
                self._run.run_id,
                self._attempt.token,
                sid,
                str(StepId.parse(sid).deadline_id()),
                child_run_id=storable.name(str(child_run_id), what="child_run_id"),
                timeout_seconds=seconds(timeout, what="timeout"),
            )
            result: ChildResult = self._resolve(sid, outcome)
            return result
