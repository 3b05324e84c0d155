"""Time limits: run deadlines, enforced by every worker for every run, and attempts that overstay.

A live run whose deadline has passed, by the database's clock, ends failed
with DeadlineExceeded whatever it is doing, and its unfinished descendants are
cancelled by the rule of cancel(). Every worker looks for such runs, whatever
its --functions, --queues or --tenant, so a run nobody here may execute still
ends on time; a run held by a worker also ends at its next context call, and
the worker holding it ends it at the deadline itself (``stop_overstay``, ``land_overstay``).

An attempt that runs past its function's timeout is failed with
AttemptTimedOut and retried per the run's policy; its handler is stopped (an
async one is cancelled) and whatever its thread writes later is refused by the
fence, for the run is no longer running under that token.
"""

from __future__ import annotations

import logging

from ..exceptions import AttemptTimedOut, DeadlineExceeded
from ..store import deadlines, pool
from . import telemetry
from .attempt import Attempt
from .attempt_state import Outcome
from .outcomes import deadline_error, exception_path, fail_attempt, fail_deadline, format_error

logger = logging.getLogger("durable_django.worker")

# Runs past their deadline failed per pass; a full batch is followed by another at once.
SWEEP_BATCH = 100


def expire_past_deadlines(limit: int = SWEEP_BATCH) -> int:
    """Fail up to ``limit`` live runs whose deadline has passed (any run, whatever the caller's bounds).

    Returns:
        How many runs past their deadline were found (``limit`` means there may be more).
    """
    with pool.borrowed(first=True):  # the claim loop's pass: one of a worker's engine connections
        found = deadlines.past_deadline(limit)
        for run in found:
            error = deadline_error(run.run_id, run.deadline)
            if deadlines.expire(run, error=format_error(error), error_type=exception_path(error)) is not None:
                logger.info("run %s failed: its deadline %s has passed", run.run_id, run.deadline)
    return len(found)


def seconds_until_next_deadline() -> float | None:
    """Seconds until the soonest deadline of a live run that has not passed yet; None if there is none."""
    with pool.borrowed(first=True):
        return deadlines.seconds_until_next_deadline()


def timed_out_error(attempt: Attempt) -> AttemptTimedOut:
    run = attempt.run
    where = attempt.where()
    return AttemptTimedOut(
        f"attempt {attempt.token} of run {run.run_id} ({run.name} v{run.version}) ran longer than its "
        f"timeout of {attempt.timeout:g}s" + (f"; its handler was at:\n{where}" if where else ""),
        run_id=run.run_id,
        attempt=attempt.token,
    )


def stop_overstay(attempt: Attempt, now: float) -> AttemptTimedOut | DeadlineExceeded | None:
    """Stop an attempt whose timeout or run deadline passed at ``now`` (monotonic): it becomes the claim
    loop's to land and end, and its handler is interrupted (an async one is cancelled).

    Returns:
        What to land it with, or None when the handler had returned already or the attempt ended (its own
        landing stands).
    """
    timed_out = (timeout_at := attempt.timeout_at()) is not None and timeout_at <= now
    # Read before the handler is interrupted: where it was stuck.
    error = timed_out_error(attempt) if timed_out else deadline_error(attempt.run.run_id, attempt.run.deadline)
    return error if attempt.overstay() else None


def land_overstay(attempt: Attempt, error: AttemptTimedOut | DeadlineExceeded) -> Outcome:
    """Land an attempt a time limit stopped: a timeout fails the attempt with AttemptTimedOut (retried per
    the policy), a deadline fails the run with DeadlineExceeded (its descendants cancelled).

    Both writes are fenced on the attempt's token; from then on the run is no longer running under it,
    so nothing the handler's thread writes later is accepted. The attempt ends here (its thread's own end
    of it is refused: it may never come back).
    """
    run = attempt.run
    fields = telemetry.log_fields(attempt)
    if isinstance(error, DeadlineExceeded):
        logger.warning(
            "run %s: its deadline passed during attempt %s; failing it", run.run_id, attempt.token, extra=fields
        )
        outcome = fail_deadline(attempt)
    else:
        logger.warning(
            "run %s: attempt %s timed out after %gs", run.run_id, attempt.token, attempt.timeout or 0, extra=fields
        )
        outcome = fail_attempt(attempt, error)
        if outcome in (Outcome.RETRYING, Outcome.FAILED):
            outcome = Outcome.TIMED_OUT
    attempt.end(outcome, at_limit=True)
    return outcome
