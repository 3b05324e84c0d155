"""Execute one attempt of a claimed run: call its handler once, land what it did, and end the attempt.

What happened decides how it lands (``engine/outcomes.py``); the attempt then
ends at its one end point (``Attempt.end``), unless a time limit stopped it (the
claim loop ends it) or its success went to the worker's landing batcher (which
ends it once landed).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from django.db import connections
from django.utils.translation import gettext

from ..conf import durable_settings
from ..exceptions import (
    AttemptTimedOut,
    Cancelled,
    DeadlineReached,
    InvalidInput,
    LeaseLost,
    RecoveriesExhausted,
    Suspended,
    UnknownFunction,
)
from ..registry import Handler, registry
from ..storable import json_text
from ..store.db import connection
from . import telemetry, tracing
from .async_context import AsyncContext
from .attempt import Attempt
from .attempt_state import AttemptState, Outcome
from .context import Context
from .outcomes import cancel, complete_now, fail_attempt, fail_deadline

logger = logging.getLogger("durable_django.worker")

# Runs an async handler's coroutine function to its end on an event loop of its own, from a thread with none.
LoopRunner = Callable[[Callable[[], Coroutine[Any, Any, Any]]], Any]
# Lands a returned handler's output (JSON): at once, returning the outcome to end the attempt with, or by
# handing the attempt to a batcher that lands it with others and ends it (None: it has not ended yet).
LandSuccess = Callable[[Attempt, str], Outcome | None]


def run_on_new_loop(main: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
    """The worker's way: a fresh loop in the slot's thread, closed when the handler ends."""
    return asyncio.run(main())


def execute(
    attempt: Attempt,
    *,
    land_success: LandSuccess = complete_now,
    run_loop: LoopRunner = run_on_new_loop,
) -> Outcome | None:
    """Run the handler once, land what it did, and end the attempt with its outcome.

    Args:
        attempt: the claimed run and its fence token.
        land_success: called with (attempt, output JSON) when the handler returned.
        run_loop: how an ``async def`` handler's event loop is run.

    Returns:
        The outcome it landed; None when ``land_success`` handed the attempt over, to be ended once landed.
        An attempt a time limit stopped is not ended here: the claim loop lands and ends it
        (``time_limits.land_overstay``), and what its thread landed is returned, ended by nobody.
    """
    telemetry.attempt_started(attempt)
    try:
        with tracing.current(attempt):
            try:
                outcome = _execute(attempt, land_success, run_loop)
            except LeaseLost:  # raised by a landing that waited out a cut connection while the lease went
                outcome = _lost(attempt)
    except BaseException:
        attempt.end(Outcome.ERROR)
        raise
    if outcome is not None:
        attempt.end(outcome)
    return outcome


def _reclaimed_past_timeout(attempt: Attempt) -> AttemptTimedOut:
    run = attempt.run
    return AttemptTimedOut(
        f"attempt {attempt.token - 1} of run {run.run_id} ({run.name} v{run.version}) outlived its timeout of "
        f"{attempt.timeout:g}s and its worker never landed it (it died or stalled); counted as timed out",
        run_id=run.run_id,
        attempt=attempt.token - 1,
    )


def _lost(attempt: Attempt) -> Outcome:
    """The outcome of an attempt that learnt its lease was gone, in its handler or while landing."""
    if attempt.state is AttemptState.CANCELLED:
        return Outcome.CANCELLED  # the heartbeat landed it cancelled (and logged it)
    logger.warning(
        gettext("run %(run_id)s lost its lease; its claim %(claim)d stopped without writing"),
        {"run_id": attempt.run.run_id, "claim": attempt.token},
        extra=telemetry.log_fields(attempt, Outcome.LOST),
    )
    return Outcome.LOST


def _execute(attempt: Attempt, land_success: LandSuccess, run_loop: LoopRunner) -> Outcome | None:
    run = attempt.run
    if attempt.cancel_requested:
        # Cancel requested while nobody held it (its worker died): land it without calling the body.
        return cancel(attempt)
    if attempt.past_deadline():
        return fail_deadline(attempt)
    if attempt.recovered and run.recoveries > durable_settings.MAX_RECOVERIES:
        return fail_attempt(
            attempt,
            RecoveriesExhausted(
                f"run was reclaimed {run.recoveries} times after its worker died "
                f"(MAX_RECOVERIES={durable_settings.MAX_RECOVERIES}); it may be killing its worker",
                run_id=run.run_id,
            ),
            final=True,
            counts=False,
        )
    if attempt.outlived_timeout_before():
        # Its holder died or stalled past the timeout: that attempt counts against the retry budget, as if
        # its holder had landed the timeout, and runs again only if the policy allows another attempt.
        return fail_attempt(attempt, _reclaimed_past_timeout(attempt))
    try:
        handler = registry.resolve(run.name, run.version)
    except (UnknownFunction, ImportError) as exc:
        return fail_attempt(attempt, exc, final=True)
    ctx: Context | AsyncContext
    try:
        if inspect.iscoroutinefunction(handler):
            result, ctx = _run_async(handler, attempt, run_loop)
        else:
            ctx = Context(attempt, connection=connection())
            with attempt.user_code():
                result = handler(ctx, run.input)
        # The handler returned: from here a requested cancel no longer stops it (the completion wins).
        attempt.finish()
    except Suspended:
        logger.info(
            "run %s (%s v%s) suspended",
            run.run_id,
            run.name,
            run.version,
            extra=telemetry.log_fields(attempt, Outcome.SUSPENDED),
        )
        return Outcome.SUSPENDED
    except LeaseLost:
        return _lost(attempt)
    except Cancelled:
        return cancel(attempt)
    except DeadlineReached:
        return Outcome.LOST if attempt.lost else fail_deadline(attempt)
    except BaseException as exc:  # noqa: BLE001 - every failure of user code is data
        if isinstance(exc, asyncio.CancelledError) and (attempt.lost or attempt.cancel_requested):
            if attempt.state is AttemptState.CANCELLED:
                return Outcome.CANCELLED
            return Outcome.LOST if attempt.lost else cancel(attempt)
        return fail_attempt(attempt, exc)
    if ctx.suspended:
        logger.warning(
            "run %s: the handler caught its suspension and returned; the value is dropped",
            run.run_id,
            extra=telemetry.log_fields(attempt, Outcome.SUSPENDED),
        )
        return Outcome.SUSPENDED
    if attempt.lost:
        return Outcome.LOST
    try:
        output = json_text(result, what=f"the return value of {run.name}")
    except InvalidInput as exc:
        return fail_attempt(attempt, exc)
    return land_success(attempt, output)


def _run_async(handler: Handler, attempt: Attempt, run_loop: LoopRunner) -> tuple[Any, AsyncContext]:
    """Run an async handler on a fresh event loop; its database work runs on a thread of its own."""
    database_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="durable-async-db")
    ctx = AsyncContext(attempt, database_thread)

    async def main() -> Any:
        attempt.bind_async(asyncio.get_running_loop(), asyncio.current_task())
        attempt.check()
        return await handler(ctx, attempt.run.input)

    try:
        return run_loop(main), ctx
    finally:
        # The loop is closed now: stops must no longer be routed to it.
        attempt.bind_async(None, None)
        database_thread.submit(connections.close_all).result()
        database_thread.shutdown()
