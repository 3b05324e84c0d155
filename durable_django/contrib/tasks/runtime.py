"""Running Django Tasks runs in the worker: resolve the task path, call the task, send its signals.

The plug-in installs ``task_handler`` as the registry's resolver of runs named
by an import path (``install``); the engine knows no more of Django Tasks.

Such runs carry version 0 and input ``{"args": [...], "kwargs": {...}}``; any
worker in which the path imports to a task can run them, without a durable.py
entry. Each attempt first journals its worker id (step ``worker``, occurrence =
the attempt), so a TaskResult lists the worker of every attempt. ``task_started``
is sent before the task runs and ``task_finished`` once its attempt has an
outcome, with the status the run will read back: SUCCESSFUL, FAILED, or READY
when a failure will be retried.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable
from typing import Any

from django.dispatch import Signal
from django.utils import timezone

from ...engine.async_context import AsyncContext
from ...engine.context import Context
from ...engine.outcomes import exception_path, format_error
from ...engine.run_facts import RunFacts
from ...exceptions import DurableControlFlow
from ...registry import Handler
from .backend import DurableBackend
from .compat import Task, TaskError, TaskResult, TaskResultStatus, task_finished, task_started
from .paths import resolve_task
from .results import WORKER_STEP, cancellation_error, json_value, task_context, task_error

logger = logging.getLogger("durable_django.worker")


def task_handler(path: str) -> Handler:
    """A (ctx, input) handler that runs the task at ``path`` as one attempt of its run."""
    task = resolve_task(path)

    if inspect.iscoroutinefunction(task.func):

        async def run_async(ctx: AsyncContext, payload: object) -> Any:
            await ctx.step(WORKER_STEP, lambda: ctx.run.worker_id, occurrence=ctx.attempt)
            call = TaskAttempt(task, ctx, payload)
            await _asend(task_started, call.result)
            try:
                value = call.returned(await task.func(*call.args, **call.kwargs))
            except BaseException as exc:
                if call.raised(exc):
                    await _asend(task_finished, call.result)
                raise
            await _asend(task_finished, call.result)
            return value

        return run_async

    def run(ctx: Context, payload: object) -> Any:
        ctx.step(WORKER_STEP, lambda: ctx.run.worker_id, occurrence=ctx.attempt)
        call = TaskAttempt(task, ctx, payload)
        _send(task_started, call.result)
        try:
            value = call.returned(task.func(*call.args, **call.kwargs))
        except BaseException as exc:
            # Sent inside the handler, so receivers can log sys.exc_info(), as with Django's own backends.
            if call.raised(exc):
                _send(task_finished, call.result)
            raise
        _send(task_finished, call.result)
        return value

    return run


class TaskAttempt:
    """One attempt of a task: its arguments, and the TaskResult its signals carry."""

    def __init__(self, task: Task[..., Any], ctx: RunFacts, payload: object) -> None:
        self.ctx = ctx
        context = task_context(task, ctx)
        self.result = context.task_result
        payload = payload if isinstance(payload, dict) else {}
        self.args = list(payload.get("args") or [])
        self.kwargs = dict(payload.get("kwargs") or {})
        if task.takes_context:
            self.args.insert(0, context)

    def returned(self, value: object) -> object:
        """The return value as the run will store it; a value JSON cannot hold fails the attempt."""
        value = json_value(value, what="the return value")
        self._set(status=TaskResultStatus.SUCCESSFUL, finished_at=timezone.now(), _return_value=value)
        return value

    def raised(self, exc: BaseException) -> bool:
        """Set the outcome the engine will land for ``exc``; False if the outcome is not this attempt's."""
        ctx, run = self.ctx, self.ctx.run
        stop = isinstance(exc, (DurableControlFlow, asyncio.CancelledError))
        if ctx.cancel_requested:
            # Landed cancelled, never retried: by the heartbeat (which also marks the attempt
            # lost and stops it), or by the engine once this attempt fails.
            errors: list[TaskError] = [] if stop else [task_error(exception_path(exc), format_error(exc))]
            errors.append(cancellation_error(run))
            status = TaskResultStatus.FAILED
        elif ctx.lease_lost or isinstance(exc, DurableControlFlow):
            return False  # the lease was lost: whoever holds the run now decides
        else:
            errors = [task_error(exception_path(exc), format_error(exc))]
            final = run.failures + 1 >= run.retry_policy.max_attempts
            # READY: the engine retries it after the policy's delay.
            status = TaskResultStatus.FAILED if final else TaskResultStatus.READY
        finished = timezone.now() if status == TaskResultStatus.FAILED else None
        self._set(status=status, finished_at=finished, errors=errors)
        return True

    def _set(self, **fields: object) -> None:
        # TaskResult is frozen; Django's own backends update it in place the same way.
        for name, value in fields.items():
            object.__setattr__(self.result, name, value)


def _send(signal: Signal, result: TaskResult[..., Any]) -> None:
    _log_failures(signal.send_robust(sender=_sender(), task_result=result), result)


async def _asend(signal: Signal, result: TaskResult[..., Any]) -> None:
    _log_failures(await signal.asend_robust(sender=_sender(), task_result=result), result)


def _sender() -> type[DurableBackend]:
    return DurableBackend


def _log_failures(responses: list[tuple[Callable[..., Any], object]], result: TaskResult[..., Any]) -> None:
    # A broken receiver must not fail (and so re-run) a task: it is logged instead.
    for receiver, response in responses:
        if isinstance(response, BaseException):
            logger.error(
                "task %s: signal receiver %r raised %r",
                result.id,
                receiver,
                response,
                exc_info=(type(response), response, response.__traceback__),
                extra={"run_id": result.id, "function": result.task.module_path},
            )
