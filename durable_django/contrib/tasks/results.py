"""How a durable run reads as a Django ``TaskResult``: status, errors, workers, return value.

A run stores one error, its class path and traceback; a cancelled run, which
Django's tasks know no status for, reads FAILED with a cancellation error.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, ParamSpec, TypeVar

from ...engine.run_facts import RunFacts
from ...exceptions import Cancelled, InvalidInput
from ...journal_ids import StepId
from ...registry import TASK_PATH_VERSION
from ...states import RunStatus
from ...storable import MAX_JSON_DEPTH, json_text
from ...types import Run
from .compat import Task, TaskContext, TaskError, TaskResult, TaskResultStatus, normalize_json

# The journal step under which each attempt records its worker id.
WORKER_STEP = "worker"

# A durable run's status as Django's tasks framework names it. A cancelled run
# failed from the task's point of view; its errors say it was cancelled.
STATUS = {
    RunStatus.PENDING: TaskResultStatus.READY,
    RunStatus.RUNNING: TaskResultStatus.RUNNING,
    RunStatus.WAITING: TaskResultStatus.RUNNING,
    RunStatus.SUCCEEDED: TaskResultStatus.SUCCESSFUL,
    RunStatus.FAILED: TaskResultStatus.FAILED,
    RunStatus.CANCELLED: TaskResultStatus.FAILED,
}

CANCELLED_PATH = f"{Cancelled.__module__}.{Cancelled.__qualname__}"

_P = ParamSpec("_P")
_R = TypeVar("_R")


def task_status(run: Run) -> TaskResultStatus:
    """The run's status as Django names it; a claimed run still waiting for a slot is READY, not RUNNING."""
    if run.status == RunStatus.RUNNING and run.attempt_started_at is None:
        return TaskResultStatus.READY
    return STATUS[run.status]


def json_value(value: object, *, what: str) -> object:
    """``value`` as Django normalises it, refused unless it survives a JSON round trip.

    Django's ``normalize_json`` raises its own TypeError or ValueError for what
    JSON cannot hold; a ValueError here covers what it lets through but JSON
    would change (NaN, infinities, dict keys that are not strings) or PostgreSQL
    cannot store (a NUL or a lone surrogate, too deep, too large): raised before
    any statement, so the caller's transaction is untouched.

    Args:
        value: task arguments or a return value.
        what: how error messages name it.

    Returns:
        The normalised value (tuples become lists, bytes become text).
    """
    try:
        normalized = normalize_json(value)
    except RecursionError:  # Django's normalisation recurses: a value this deep is past MAX_JSON_DEPTH anyway
        raise ValueError(f"Unsupported value in {what}: nested deeper than {MAX_JSON_DEPTH} levels") from None
    try:
        decoded = json.loads(json.dumps(normalized, allow_nan=False))
    except ValueError as exc:
        raise ValueError(f"Unsupported value in {what}: {exc}") from None
    if decoded != normalized:
        raise ValueError(
            f"Unsupported value in {what}: it does not survive a JSON round trip (is a dict key not a string?)"
        )
    try:
        json_text(normalized, what=what)
    except InvalidInput as exc:
        raise ValueError(f"Unsupported value in {what}: {exc}") from None
    return normalized


def task_for_run(task: Task[_P, _R], run: Run) -> Task[_P, _R]:
    """``task`` with the priority, queue and (while unclaimed) run_after its run was enqueued with.

    Args:
        task: the task its module path imports to.
        run: one of its runs.

    Returns:
        A copy of the task made with ``Task.using()``.
    """
    changes: dict[str, Any] = {"priority": run.priority, "queue_name": run.queue}
    if run.status == RunStatus.PENDING and run.attempts == 0 and run.available_at is not None:
        changes["run_after"] = run.available_at
    return task.using(**changes)


def worker_ids(run: Run, journal: dict[str, Any]) -> list[str]:
    """One worker id per attempt, as each attempt journalled it.

    An attempt whose worker died before journalling is the run's last worker
    if it is the latest attempt, and an empty string otherwise, so that
    ``TaskResult.attempts`` always equals the run's attempts.

    Args:
        run: the run record.
        journal: its journal, step_id -> value.

    Returns:
        ``run.attempts`` worker ids, oldest attempt first.
    """
    ids = []
    for attempt in range(1, run.attempts + 1):
        recorded = journal.get(str(StepId(TASK_PATH_VERSION, WORKER_STEP, attempt)))
        if recorded is None and attempt == run.attempts:
            recorded = run.worker_id
        ids.append(recorded or "")
    return ids


def task_error(exception_class_path: str, traceback: str) -> TaskError:
    """Django's record of an exception, as the run's error_type and error hold it."""
    return TaskError(exception_class_path=exception_class_path, traceback=traceback)


def cancellation_error(run: Run) -> TaskError:
    """The error a cancelled run reports: Django's tasks know no cancelled status."""
    when = f" (requested at {run.cancel_requested_at.isoformat()})" if run.cancel_requested_at else ""
    return task_error(CANCELLED_PATH, f"{CANCELLED_PATH}: run {run.run_id} was cancelled{when}\n")


def task_result(
    task: Task[_P, _R],
    run: Run,
    *,
    backend: str,
    last_attempted_at: datetime | None,
    journal: dict[str, Any],
    attempt_errors: list[tuple[str | None, str]] | None = None,
) -> TaskResult[_P, _R]:
    """The TaskResult a run stands for.

    Args:
        task: the task, as ``task_for_run`` rebuilds it.
        run: the run record.
        backend: the alias of the backend that reports it.
        last_attempted_at: when the latest attempt was claimed.
        journal: the run's journal, where each attempt recorded its worker.
        attempt_errors: (error class path, traceback) of each failed attempt, oldest first; None when
            they were not read (only the run's last error is known).

    Returns:
        A TaskResult; ``errors`` holds every failed attempt's error, oldest first, then the run's own error
        if no attempt ended with it (a deadline that passed between attempts), and a cancellation error if
        it was cancelled.
    """
    payload = run.input if isinstance(run.input, dict) else {}
    attempt_errors = attempt_errors or []
    errors = [task_error(error_type or "builtins.Exception", error) for error_type, error in attempt_errors]
    if run.error and (not attempt_errors or attempt_errors[-1][1] != run.error):
        errors.append(task_error(run.error_type or "builtins.Exception", run.error))
    if run.status == RunStatus.CANCELLED:
        errors.append(cancellation_error(run))
    result = TaskResult(
        task=task,
        id=run.run_id,
        status=task_status(run),
        enqueued_at=run.created_at,
        started_at=run.started_at,
        finished_at=None if run.is_live else run.finished_at,
        last_attempted_at=last_attempted_at,
        args=list(payload.get("args") or []),
        kwargs=dict(payload.get("kwargs") or {}),
        backend=backend,
        errors=errors,
        worker_ids=worker_ids(run, journal),
    )
    if run.status == RunStatus.SUCCEEDED:
        object.__setattr__(result, "_return_value", run.output)
    return result


def task_context(task: Task[_P, _R], ctx: RunFacts) -> TaskContext[_P, _R]:
    """The TaskContext of the attempt ``ctx`` belongs to.

    Its ``task_result`` is RUNNING and lists one worker per attempt so far, so
    ``context.attempt`` is ``ctx.attempt``.

    Args:
        task: the task being run.
        ctx: the engine's context of the attempt.

    Returns:
        The TaskContext handed to a ``takes_context`` task.
    """
    result = task_result(
        task_for_run(task, ctx.run),
        ctx.run,
        backend=task.backend,
        last_attempted_at=ctx.claimed_at,
        journal=ctx.journal,
    )
    return TaskContext(task_result=result)
