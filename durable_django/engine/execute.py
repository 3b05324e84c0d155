"""Execute one attempt of a claimed run and land its outcome under the fence."""

from __future__ import annotations

import asyncio
import inspect
import logging
import traceback
from concurrent.futures import ThreadPoolExecutor

from django.db import connections

from ..conf import durable_settings
from ..exceptions import Cancelled, LeaseLost, Suspended, UnknownFunction
from ..registry import TASK_PATH_VERSION, registry
from ..store import runs as run_store
from .attempt import Attempt
from .context import AsyncContext, Context
from .values import json_text

logger = logging.getLogger("durable_django.worker")

# Outcomes of an attempt, as the worker counts and logs them.
SUCCEEDED, FAILED, RETRYING, CANCELLED, SUSPENDED, LOST = (
    "succeeded", "failed", "retrying", "cancelled", "suspended", "lost")


def exception_path(exc: BaseException) -> str:
    cls = type(exc)
    return f"{cls.__module__}.{cls.__qualname__}"


def format_error(exc: BaseException) -> str:
    return "".join(traceback.format_exception(exc)).rstrip()


def resolve_handler(name: str, version: int):
    """The callable that runs (name, version); task paths are imported, not registered."""
    if version == TASK_PATH_VERSION:
        from ..tasks_runtime import task_handler

        return task_handler(name)
    return registry.get(name, version).fn


def report_success(attempt: Attempt, landed: bool) -> str:
    """Log how a successful attempt's landing went; returns its outcome name."""
    run = attempt.run
    if not landed:
        logger.warning("run %s: completion refused, its lease was taken over", run.run_id)
        return LOST
    logger.info("run %s (%s v%s) succeeded on attempt %s", run.run_id, run.name, run.version, attempt.token)
    return SUCCEEDED


def complete_now(attempt: Attempt, output: str) -> str:
    """Land a successful attempt at once (the worker batches these instead)."""
    landed = run_store.complete(attempt.run.run_id, attempt.token, output) is not None
    return report_success(attempt, landed)


def execute(attempt: Attempt, *, land_success=complete_now) -> str:
    """Run the handler once and land what it did; returns one of the outcome names.

    Args:
        attempt: the claimed run and its fence token.
        land_success: called with (attempt, output JSON) when the handler returned.
    """
    run = attempt.run
    if attempt.cancel_requested:
        # Cancel requested while nobody held it (its worker died): land it without calling the body.
        return _cancel(attempt)
    if attempt.recovered and run.recoveries > durable_settings.MAX_RECOVERIES:
        return _fail(attempt, RuntimeError(
            f"run was reclaimed {run.recoveries} times after its worker died "
            f"(MAX_RECOVERIES={durable_settings.MAX_RECOVERIES}); it may be killing its worker"
        ), final=True, counts=False)
    try:
        handler = resolve_handler(run.name, run.version)
    except (UnknownFunction, ImportError, AttributeError) as exc:
        return _fail(attempt, exc, final=True)
    is_async = inspect.iscoroutinefunction(handler)
    ctx = Context(attempt)
    try:
        if is_async:
            result, ctx = _run_async(handler, attempt)
        else:
            with attempt.user_code():
                result = handler(ctx, run.input)
        # The handler returned: from here a requested cancel no longer stops it (the completion wins).
        attempt.finish()
    except Suspended:
        logger.info("run %s (%s v%s) suspended", run.run_id, run.name, run.version)
        return SUSPENDED
    except LeaseLost:
        logger.warning("run %s lost its lease; attempt %s stopped without writing", run.run_id, attempt.token)
        return LOST
    except Cancelled:
        return _cancel(attempt)
    except BaseException as exc:  # noqa: BLE001 - every failure of user code is data
        if isinstance(exc, asyncio.CancelledError) and (attempt.lost or attempt.cancel_requested):
            return LOST if attempt.lost else _cancel(attempt)
        return _fail(attempt, exc)
    if ctx.suspended:
        logger.warning("run %s: the handler caught its suspension and returned; the value is dropped", run.run_id)
        return SUSPENDED
    if attempt.lost:
        return LOST
    try:
        output = json_text(result, what=f"the return value of {run.name}")
    except Exception as exc:  # noqa: BLE001
        return _fail(attempt, exc)
    return land_success(attempt, output)


def _run_async(handler, attempt: Attempt):
    """Run an async handler on a fresh event loop; its database work runs on a thread of its own."""
    database_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="durable-async-db")
    ctx = AsyncContext(attempt, database_thread)

    async def main():
        attempt.bind_async(asyncio.get_running_loop(), asyncio.current_task())
        attempt.check()
        return await handler(ctx, attempt.run.input)

    try:
        return asyncio.run(main()), ctx
    finally:
        database_thread.submit(connections.close_all).result()
        database_thread.shutdown()


def _cancel(attempt: Attempt) -> str:
    run = attempt.run
    status = run_store.cancel_held(run.run_id, attempt.token)
    if status is None:
        return LOST
    logger.info("run %s (%s v%s) cancelled", run.run_id, run.name, run.version)
    return CANCELLED


def _fail(attempt: Attempt, exc: BaseException, *, final: bool = False, counts: bool = True) -> str:
    run = attempt.run
    policy = run.retry_policy
    failures = run.failures + (1 if counts else 0)
    final = final or failures >= policy.max_attempts
    delay = 0.0 if final else policy.delay_before_retry(failures)
    status = run_store.fail(
        run.run_id, attempt.token, error=format_error(exc), error_type=exception_path(exc),
        final=final, delay=delay, counts_as_failure=counts,
    )
    if status is None:
        return LOST
    if status == "pending":
        logger.info("run %s (%s v%s) failed attempt %s (%s); retry in %.2fs",
                    run.run_id, run.name, run.version, attempt.token, exception_path(exc), delay)
        return RETRYING
    if status == "cancelled":
        logger.info("run %s (%s v%s) cancelled after a failed attempt", run.run_id, run.name, run.version)
        return CANCELLED
    logger.info("run %s (%s v%s) failed: %s", run.run_id, run.name, run.version, exception_path(exc))
    return FAILED
