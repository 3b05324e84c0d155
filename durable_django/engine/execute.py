"""Execute one attempt of a claimed run and land its outcome under the fence."""

from __future__ import annotations

import asyncio
import inspect
import logging
import traceback
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from django.db import connections
from django.utils.translation import gettext

from ..conf import durable_settings
from ..exceptions import (
    AttemptTimedOut,
    Cancelled,
    DeadlineExceeded,
    DeadlineReached,
    InvalidInput,
    LeaseLost,
    OutputNotStored,
    RecoveriesExhausted,
    Suspended,
    UnknownFunction,
)
from ..registry import Handler, registry
from ..states import RunStatus
from ..storable import json_text, storable_text
from ..store import landing
from ..store.db import connection, is_disconnect
from . import telemetry, tracing
from .async_context import AsyncContext
from .attempt import Attempt
from .attempt_state import AttemptState, Outcome
from .context import Context
from .log_words import claim_words, error_words, failure_words

logger = logging.getLogger("durable_django.worker")

# Runs an async handler's coroutine function to its end on an event loop of its own, from a thread with none.
LoopRunner = Callable[[Callable[[], Coroutine[Any, Any, Any]]], Any]
# Lands a returned handler's output (JSON): at once, returning the outcome to end the attempt with, or by
# handing the attempt to a batcher that lands it with others and ends it (None: it has not ended yet).
LandSuccess = Callable[[Attempt, str], Outcome | None]


def run_on_new_loop(main: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
    """The worker's way: a fresh loop in the slot's thread, closed when the handler ends."""
    return asyncio.run(main())


def exception_path(exc: BaseException) -> str:
    cls = type(exc)
    return storable_text(f"{cls.__module__}.{cls.__qualname__}")


def format_error(exc: BaseException) -> str:
    """The traceback as Django's task backends keep it (ending in a newline), storable in PostgreSQL.

    A NUL character or a lone surrogate (which PostgreSQL cannot store) becomes
    U+FFFD, so the real error is kept rather than lost to a failed write.
    """
    return storable_text("".join(traceback.format_exception(exc)))


def report_success(attempt: Attempt, landed: bool) -> Outcome:
    """Log how a successful attempt's landing went; returns its outcome."""
    run = attempt.run
    if not landed:
        logger.warning(
            "run %s: completion refused, its lease was taken over",
            run.run_id,
            extra=telemetry.log_fields(attempt, Outcome.LOST),
        )
        return Outcome.LOST
    if logger.isEnabledFor(logging.INFO):  # the words cost a translation lookup per run: only when logged
        logger.info(
            gettext("run %(run_id)s (%(function)s v%(version)s) succeeded on %(claim)s"),
            {**_named(attempt), "claim": claim_words(attempt.token, run.failures)},
            extra=telemetry.log_fields(attempt, Outcome.SUCCEEDED),
        )
    return Outcome.SUCCEEDED


def finished(attempt: Attempt, output: str) -> landing.Finished:
    """What lands ``attempt`` succeeded with ``output``."""
    return landing.Finished(attempt.run.run_id, attempt.token, output, attempt.run.parent_run_id)


def complete_now(attempt: Attempt, output: str) -> Outcome:
    """Land a successful attempt at once (the worker batches these instead)."""
    try:
        landed = attempt.persist(landing.complete_many, [finished(attempt, output)])
    except Exception as exc:
        if is_disconnect(exc):
            raise
        return fail_attempt(attempt, output_refused(attempt, exc), final=True)
    return report_success(attempt, attempt.run.run_id in landed)


def output_refused(attempt: Attempt, refusal: Exception) -> OutputNotStored:
    """The error that fails an attempt whose output the database refused (it fails alone, for good)."""
    return OutputNotStored(
        f"the database refused to store the output of run {attempt.run.run_id}: {refusal}",
        run_id=attempt.run.run_id,
    )


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
        return _cancel(attempt)
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
        return _cancel(attempt)
    except DeadlineReached:
        return Outcome.LOST if attempt.lost else fail_deadline(attempt)
    except BaseException as exc:  # noqa: BLE001 - every failure of user code is data
        if isinstance(exc, asyncio.CancelledError) and (attempt.lost or attempt.cancel_requested):
            if attempt.state is AttemptState.CANCELLED:
                return Outcome.CANCELLED
            return Outcome.LOST if attempt.lost else _cancel(attempt)
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


def _cancel(attempt: Attempt) -> Outcome:
    run = attempt.run
    status = attempt.persist(landing.cancel_held, run.run_id, attempt.token, run.parent_run_id)
    if status is None:
        return Outcome.LOST
    logger.info(
        "run %s (%s v%s) cancelled",
        run.run_id,
        run.name,
        run.version,
        extra=telemetry.log_fields(attempt, Outcome.CANCELLED),
    )
    return Outcome.CANCELLED


def deadline_error(run_id: str, deadline: object) -> DeadlineExceeded:
    return DeadlineExceeded(f"run {run_id} had not finished by its deadline, {deadline}", run_id=run_id)


def fail_deadline(attempt: Attempt) -> Outcome:
    """End a held run whose deadline has passed: failed with DeadlineExceeded (no retry), descendants cancelled.

    Its ancestors' deadlines may have passed as well (a child's is never later
    than its parent's): the runs past their deadline end first, the topmost of
    each tree first, so a run whose parent's end cancels it ends cancelled, as
    every worker's sweep would have it. Then this attempt lands, fenced:
    cancelled if that cascade asked it to stop, else failed.
    """
    from .time_limits import expire_past_deadlines  # time_limits builds on this module

    expire_past_deadlines()
    run = attempt.run
    if attempt.persist(landing.cancel_held, run.run_id, attempt.token, run.parent_run_id, requested_only=True):
        logger.info("run %s (%s v%s) cancelled: its parent ended at its deadline", run.run_id, run.name, run.version)
        return Outcome.CANCELLED
    return fail_attempt(attempt, deadline_error(run.run_id, run.deadline), final=True, counts=False)


def fail_attempt(attempt: Attempt, exc: BaseException, *, final: bool = False, counts: bool = True) -> Outcome:
    """Land a failed attempt: retried after the policy's delay, or failed (cancelled if a cancel was requested)."""
    run = attempt.run
    attempt.error = exc
    policy = run.retry_policy
    failures = run.failures + (1 if counts else 0)
    # Only a spent budget parks: a failure that is final for another reason (a deadline, an unknown
    # function, recoveries used up) fails the run whatever the policy.
    park = not final and failures >= policy.max_attempts and policy.parks
    final = final or failures >= policy.max_attempts
    delay = 0.0 if final else policy.delay_before_retry(failures)
    status = _land_failure(attempt, exc, final=final, delay=delay, counts=counts, park=park)
    if status is None:
        return Outcome.LOST
    # Where this failure stands in the budget, when it counts and the budget decided the run's fate.
    budget = (
        failure_words(failures, policy.max_attempts)
        if counts and (status == RunStatus.PENDING or failures >= policy.max_attempts)
        else None
    )
    facts = {
        **_named(attempt),
        "claim": attempt.token,
        "budget": budget,
        "error": error_words(exception_path(exc), exc),
    }
    if status == RunStatus.WAITING:
        logger.warning(
            gettext(
                "run %(run_id)s (%(function)s v%(version)s) parked after %(budget)s, on claim %(claim)d: %(error)s; "
                "it waits for an operator's resume or cancel"
            ),
            facts,
            extra=telemetry.log_fields(attempt, telemetry.outcome_of(attempt, Outcome.FAILED)),
        )
        return Outcome.FAILED
    if status == RunStatus.PENDING:
        logger.info(
            gettext(
                "run %(run_id)s (%(function)s v%(version)s) failed on claim %(claim)d (%(budget)s): %(error)s; "
                "retry in %(delay).2fs"
            ),
            {**facts, "delay": delay},
            extra=telemetry.log_fields(attempt, telemetry.outcome_of(attempt, Outcome.RETRYING)),
        )
        return Outcome.RETRYING
    if status == RunStatus.CANCELLED:
        logger.info(
            "run %s (%s v%s) cancelled after a failed attempt",
            run.run_id,
            run.name,
            run.version,
            extra=telemetry.log_fields(attempt, Outcome.CANCELLED),
        )
        return Outcome.CANCELLED
    logger.info(
        gettext("run %(run_id)s (%(function)s v%(version)s) failed on claim %(claim)d (%(budget)s): %(error)s")
        if budget
        else gettext("run %(run_id)s (%(function)s v%(version)s) failed on claim %(claim)d: %(error)s"),
        facts,
        extra=telemetry.log_fields(attempt, telemetry.outcome_of(attempt, Outcome.FAILED)),
    )
    return Outcome.FAILED


def _named(attempt: Attempt) -> dict[str, object]:
    """The run a log line is about, by the names its messages use."""
    run = attempt.run
    return {"run_id": run.run_id, "function": run.name, "version": run.version}


def _land_failure(
    attempt: Attempt, exc: BaseException, *, final: bool, delay: float, counts: bool, park: bool
) -> str | None:
    """Land a failed attempt with its error; if the database refuses that error's text, with what can be
    stored of it (its class): a failure is always landed, never left for its lease to run out."""
    run = attempt.run
    error_type = exception_path(exc)

    def land(error: str) -> str | None:
        return attempt.persist(
            landing.fail,
            run.run_id,
            attempt.token,
            run.parent_run_id,
            error=error,
            error_type=error_type,
            final=final,
            delay=delay,
            counts_as_failure=counts,
            park=park,
        )

    try:
        return land(format_error(exc))
    except Exception as refused:
        if is_disconnect(refused):
            raise
        logger.warning(
            gettext(
                "run %(run_id)s: the database refused the error of claim %(claim)d (%(refusal)s); "
                "storing its class alone"
            ),
            {"run_id": run.run_id, "claim": attempt.token, "refusal": exception_path(refused)},
            extra=telemetry.log_fields(attempt),
        )
        refusal = exception_path(refused)
    return land(f"{error_type}: the error's text could not be stored ({refusal})\n")
