"""The ``ctx`` of an ``async def`` durable function: the sync context's methods, awaited off the event loop."""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any, ParamSpec, TypeVar, Unpack

from ..types import ChildResult
from . import replay, telemetry
from .attempt import Attempt
from .call_options import AsyncSpawnOptions, ResultWaitOptions, SignalWaitOptions
from .context import Context
from .run_facts import RunFacts

_P = ParamSpec("_P")
_T = TypeVar("_T")

# Inside a step's fn, in this task (a contextvar: tasks the body runs beside it are not inside it).
_IN_STEP: contextvars.ContextVar[bool] = contextvars.ContextVar("durable_in_step", default=False)


@contextmanager
def _inside_step() -> Iterator[None]:
    token = _IN_STEP.set(True)
    try:
        yield
    finally:
        _IN_STEP.reset(token)


class AsyncContext(RunFacts):
    """The context of an ``async def`` durable function: the same methods, awaited.

    Database work runs on one thread owned by the attempt (Django forbids it on
    the event loop's thread); the engine closes that thread's connection when
    the attempt ends.
    """

    def __init__(self, attempt: Attempt, executor: ThreadPoolExecutor) -> None:
        self._sync = Context(attempt)
        self._attempt = attempt
        self._executor = executor

    @property
    def suspended(self) -> bool:
        return self._sync.suspended

    async def _off_loop(self, fn: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs) -> _T:
        call = functools.partial(fn, *args, **kwargs)
        return await asyncio.get_running_loop().run_in_executor(self._executor, call)

    async def step(self, name: str, fn: Callable[[], Any], *, occurrence: int = 0, pivot: bool = False) -> Any:
        sid = await self._off_loop(self._sync._enter, name, occurrence)
        if sid in self._attempt.journal:
            telemetry.step_replayed(self._attempt, name)
            return self._attempt.journal[sid]
        await self._off_loop(replay.check_before_executing, self._attempt, sid)
        with telemetry.step(self._attempt, name, occurrence), _inside_step():
            # A plain fn runs on the database thread in a copy of this context, so its spans nest in the step's.
            call: Callable[[], Awaitable[Any]] = (
                fn
                if inspect.iscoroutinefunction(fn)
                else functools.partial(self._off_loop, contextvars.copy_context().run, fn)
            )
            if pivot:
                # As in the sync context: a requested cancel waits until the pivot's value is journalled.
                with self._attempt.pivot():
                    began = time.monotonic()
                    value = await call()
                    duration = time.monotonic() - began
                    return await self._off_loop(self._sync._record, sid, name, value, pivot, duration)
            began = time.monotonic()
            value = await call()
            duration = time.monotonic() - began
            return await self._off_loop(self._sync._record, sid, name, value, pivot, duration)

    async def patched(self, patch_id: str) -> bool:
        """As ``Context.patched``: journalled, so a replay gives the same answer."""
        return await self._off_loop(self._sync._patched, patch_id)

    async def deprecated_patch(self, patch_id: str) -> None:
        """As ``Context.deprecated_patch``."""
        await self._off_loop(self._sync.deprecated_patch, patch_id)

    async def set_progress(self, value: object) -> None:
        return await self._off_loop(self._sync.set_progress, value)

    async def set_event(self, key: str, value: object) -> None:
        return await self._off_loop(self._sync.set_event, key, value, in_step=_IN_STEP.get())

    async def write_stream(self, key: str, value: object) -> None:
        return await self._off_loop(self._sync.write_stream, key, value, in_step=_IN_STEP.get())

    async def close_stream(self, key: str) -> None:
        return await self._off_loop(self._sync.close_stream, key)

    async def sleep_for(self, name: str, delay: timedelta | float, *, occurrence: int = 0) -> None:
        return await self._off_loop(self._sync.sleep_for, name, delay, occurrence=occurrence)

    async def sleep_until(self, name: str, when: datetime, *, occurrence: int = 0) -> None:
        return await self._off_loop(self._sync.sleep_until, name, when, occurrence=occurrence)

    async def wait_for_signal(self, name: str, signal: str, **options: Unpack[SignalWaitOptions]) -> Any:
        return await self._off_loop(self._sync.wait_for_signal, name, signal, **options)

    async def spawn(self, name: str, function: str, input: object = None, **options: Unpack[AsyncSpawnOptions]) -> str:
        return await self._off_loop(self._sync.spawn, name, function, input, **options)

    async def wait_for_result(self, name: str, child_run_id: str, **options: Unpack[ResultWaitOptions]) -> ChildResult:
        return await self._off_loop(self._sync.wait_for_result, name, child_run_id, **options)

    async def spawn_many(
        self, name: str, function: str, inputs: Iterable[object], **options: Unpack[AsyncSpawnOptions]
    ) -> list[str]:
        return await self._off_loop(self._sync.spawn_many, name, function, inputs, **options)

    async def wait_for_all(
        self, name: str, child_run_ids: Iterable[str], **options: Unpack[ResultWaitOptions]
    ) -> list[ChildResult]:
        return await self._off_loop(self._sync.wait_for_all, name, child_run_ids, **options)

    async def wait_for_any(
        self, name: str, child_run_ids: Iterable[str], **options: Unpack[ResultWaitOptions]
    ) -> tuple[int, ChildResult] | None:
        return await self._off_loop(self._sync.wait_for_any, name, child_run_ids, **options)
