"""How an attempt's end lands under its fence, and the line each end logs.

A success lands at once (``complete_now``) or with others (``engine/lifecycle.py``
``land_successes``); a failure lands retried after the policy's delay, parked,
or failed for good, always with its error (or what of it can be stored); a
cancel and a passed deadline land as the cancel rule says. Each returns the
``Outcome`` the attempt ends with (``Attempt.end``); none of them ends it.
"""

from __future__ import annotations

import logging
import traceback

from django.utils.translation import gettext

from ..exceptions import DeadlineExceeded, OutputNotStored
from ..states import RunStatus
from ..storable import storable_text
from ..store import landing
from ..store.db import is_disconnect
from . import telemetry
from .attempt import Attempt
from .attempt_state import Outcome
from .log_words import claim_words, error_words, failure_words

logger = logging.getLogger("durable_django.worker")


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


def cancel(attempt: Attempt) -> Outcome:
    """Land a held run cancelled (its cancel was requested); LOST if the fence refused it."""
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
