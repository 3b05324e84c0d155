"""The ``ctx`` handed to durable functions: replay-or-record steps, sleeps, waits and children.

Every method first raises the stop the attempt owes (cancel, lost lease,
earlier suspension). A journalled value is returned without calling anything;
otherwise the work is done and journalled under the claim's fence token.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime

from ..exceptions import Cancelled, InvalidInput, StepResultNotSerializable, Suspended
from ..store import journal as journal_store
from . import submit
from .attempt import Attempt
from .values import aware, json_text, seconds

_SPAWN_FORBIDDEN = ("idempotency_key", "coalesce_key", "tenant_id", "parent_run_id")


def step_id(version: int, name: str, occurrence: int) -> str:
    if not isinstance(name, str) or not name:
        raise InvalidInput(f"a step name must be a non-empty string, got {name!r}")
    if not isinstance(occurrence, int) or isinstance(occurrence, bool) or occurrence < 0:
        raise InvalidInput(f"occurrence must be a non-negative integer, got {occurrence!r}")
    return f"v{version}:{name}:{occurrence}"


class Context:
    """The context of one attempt of a synchronous durable function."""

    def __init__(self, attempt: Attempt):
        self._attempt = attempt
        self._run = attempt.run
        self.suspended = False

    run_id = property(lambda self: self._run.run_id)
    name = property(lambda self: self._run.name)
    version = property(lambda self: self._run.version)
    attempt = property(lambda self: self._attempt.token)
    tenant_id = property(lambda self: self._run.tenant_id)
    input = property(lambda self: self._run.input)

    def idempotency_key(self, step_name: str, occurrence: int = 0) -> str:
        """A key for an external call made inside a step, stable across replays."""
        return f"{self._run.run_id}:{self._run.version}:{step_name}:{occurrence}"

    # -- steps -------------------------------------------------------------

    def _enter(self, name: str, occurrence: int) -> str:
        if self.suspended:
            raise Suspended()
        self._attempt.check()
        return step_id(self._run.version, name, occurrence)

    def _record(self, sid: str, name: str, value, pivot: bool):
        try:
            text = json_text(value, what="step result")
        except InvalidInput as exc:
            raise StepResultNotSerializable(
                f"step {name!r} of {self._run.name} returned a value that is not JSON-serialisable: {exc}",
                step=name, run_id=self._run.run_id,
            ) from None
        recorded = journal_store.record_step(self._run.run_id, self._attempt.token, sid, text, pivot=pivot)
        if pivot:
            self._attempt.pivoted = True
        if recorded.cancel_requested:
            self._attempt.cancel_requested = True
        self._attempt.journal[sid] = recorded.value
        return recorded.value

    def step(self, name: str, fn, *, occurrence: int = 0, pivot: bool = False):
        """Return the journalled value of (name, occurrence), or call ``fn`` and journal its result."""
        with self._attempt.engine_code():
            sid = self._enter(name, occurrence)
            if sid in self._attempt.journal:
                return self._attempt.journal[sid]
        if pivot:
            with self._attempt.pivot(), self._attempt.user_code():
                value = fn()
        else:
            with self._attempt.user_code():
                value = fn()
        with self._attempt.engine_code():
            return self._record(sid, name, value, pivot)

    # -- suspensions -------------------------------------------------------

    def _resolve(self, sid: str, outcome):
        if outcome.cancel_requested:
            self._attempt.cancel_requested = True
            raise Cancelled()
        if outcome.suspended:
            self.suspended = True
            raise Suspended()
        self._attempt.journal[sid] = outcome.value
        return outcome.value

    def _sleep(self, name, occurrence, *, delay=None, until=None):
        with self._attempt.engine_code():
            sid = self._enter(name, occurrence)
            stored = self._attempt.journal.get(sid)
            if stored is not None and datetime.fromisoformat(stored["at"]) <= self._attempt.database_now:
                return None
            outcome = journal_store.sleep(self._run.run_id, self._attempt.token, sid, seconds=delay, until=until)
            self._resolve(sid, outcome)
            return None

    def sleep_for(self, name: str, delay, *, occurrence: int = 0) -> None:
        """Sleep ``delay`` (a timedelta or seconds) measured by PostgreSQL's clock, holding no worker."""
        return self._sleep(name, occurrence, delay=seconds(delay, what="delay", allow_none=False))

    def sleep_until(self, name: str, when: datetime, *, occurrence: int = 0) -> None:
        """Sleep until an aware datetime, holding no worker."""
        if when is None:
            raise InvalidInput("sleep_until needs a datetime")
        return self._sleep(name, occurrence, until=aware(when, what="when"))

    def wait_for_signal(self, name: str, signal: str, *, occurrence: int = 0, signal_occurrence: int = 0,
                        timeout=None, default=None):
        """Return the value of signal (signal, signal_occurrence), or ``default`` after ``timeout``."""
        with self._attempt.engine_code():
            sid = self._enter(name, occurrence)
            if sid in self._attempt.journal:
                return self._attempt.journal[sid]
            if not isinstance(signal, str) or not signal:
                raise InvalidInput(f"a signal name must be a non-empty string, got {signal!r}")
            step_id(self._run.version, signal, signal_occurrence)  # validates signal_occurrence
            json_text(default, what="default")
            outcome = journal_store.wait_for_signal(
                self._run.run_id, self._attempt.token, sid, f"{sid}#deadline", signal=signal,
                occurrence=signal_occurrence, timeout_seconds=seconds(timeout, what="timeout"), default=default,
            )
            return self._resolve(sid, outcome)

    def spawn(self, name: str, function: str, input=None, *, occurrence: int = 0, **enqueue_options) -> str:
        """Enqueue a child run (once, whatever the replays) and return its run id."""
        with self._attempt.engine_code():
            sid = self._enter(name, occurrence)
            if sid in self._attempt.journal:
                return self._attempt.journal[sid]
            forbidden = sorted(set(enqueue_options) & set(_SPAWN_FORBIDDEN))
            if forbidden:
                raise InvalidInput(f"spawn() sets {', '.join(forbidden)} itself: the step identity keys the child")
            params = submit.build(
                function, input, tenant_id=self._run.tenant_id, parent_run_id=self._run.run_id,
                idempotency_key=f"spawn:{self._run.run_id}:{sid}", **enqueue_options,
            )
            child_id = journal_store.spawn(self._run.run_id, self._attempt.token, sid, params)
            self._attempt.journal[sid] = child_id
            return child_id

    def wait_for_result(self, name: str, child_run_id: str, *, occurrence: int = 0, timeout=None) -> dict:
        """Wait for a direct child to land; returns {"state", "result", "error"}."""
        with self._attempt.engine_code():
            sid = self._enter(name, occurrence)
            if sid in self._attempt.journal:
                return self._attempt.journal[sid]
            outcome = journal_store.wait_for_child(
                self._run.run_id, self._attempt.token, sid, f"{sid}#deadline", child_run_id=str(child_run_id),
                timeout_seconds=seconds(timeout, what="timeout"),
            )
            return self._resolve(sid, outcome)


class AsyncContext:
    """The context of an ``async def`` durable function: the same methods, awaited.

    Database work runs on one thread owned by the attempt (Django forbids it on
    the event loop's thread); the engine closes that thread's connection when
    the attempt ends.
    """

    def __init__(self, attempt: Attempt, executor: ThreadPoolExecutor):
        self._sync = Context(attempt)
        self._attempt = attempt
        self._executor = executor

    run_id = property(lambda self: self._sync.run_id)
    name = property(lambda self: self._sync.name)
    version = property(lambda self: self._sync.version)
    attempt = property(lambda self: self._sync.attempt)
    tenant_id = property(lambda self: self._sync.tenant_id)
    input = property(lambda self: self._sync.input)

    @property
    def suspended(self) -> bool:
        return self._sync.suspended

    def idempotency_key(self, step_name: str, occurrence: int = 0) -> str:
        return self._sync.idempotency_key(step_name, occurrence)

    async def _off_loop(self, fn, *args, **kwargs):
        call = functools.partial(fn, *args, **kwargs)
        return await asyncio.get_running_loop().run_in_executor(self._executor, call)

    async def step(self, name: str, fn, *, occurrence: int = 0, pivot: bool = False):
        sid = self._sync._enter(name, occurrence)
        if sid in self._attempt.journal:
            return self._attempt.journal[sid]
        call = fn if inspect.iscoroutinefunction(fn) else functools.partial(self._off_loop, fn)
        if pivot:
            with self._attempt.pivot():
                value = await call()
        else:
            value = await call()
        return await self._off_loop(self._sync._record, sid, name, value, pivot)

    async def sleep_for(self, name, delay, *, occurrence=0):
        return await self._off_loop(self._sync.sleep_for, name, delay, occurrence=occurrence)

    async def sleep_until(self, name, when, *, occurrence=0):
        return await self._off_loop(self._sync.sleep_until, name, when, occurrence=occurrence)

    async def wait_for_signal(self, name, signal, **options):
        return await self._off_loop(self._sync.wait_for_signal, name, signal, **options)

    async def spawn(self, name, function, input=None, **options):
        return await self._off_loop(self._sync.spawn, name, function, input, **options)

    async def wait_for_result(self, name, child_run_id, **options):
        return await self._off_loop(self._sync.wait_for_result, name, child_run_id, **options)
