"""``DurableBackend``: Django's Tasks framework backed by durable runs.

A task enqueued here is an ordinary durable run named by the task's module
path, with version 0 and input ``{"args": [...], "kwargs": {...}}``: visible in
the admin, cancellable, retried per a :class:`~durable_django.RetryPolicy`, and
executed by ``manage.py durable_worker`` (see ``tasks_runtime``). Results are
read back from ``durable_run``. Works with ``django.tasks`` (Django 6) and with
the ``django_tasks`` backport (Django 5.2).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime

from django.apps import apps
from django.core import checks
from django.utils import timezone

try:  # Django 6 ships the framework.
    from django.tasks import TaskContext, TaskResult, TaskResultStatus
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import Task, TaskError
    from django.tasks.exceptions import InvalidTask, InvalidTaskBackend, TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued, task_finished, task_started
    from django.utils.json import normalize_json
except ImportError:  # Django 5.2: the django-tasks backport.
    from django_tasks import TaskContext, TaskResult, TaskResultStatus
    from django_tasks.backends.base import BaseTaskBackend
    from django_tasks.base import Task, TaskError
    from django_tasks.exceptions import InvalidTaskBackendError as InvalidTaskBackend
    from django_tasks.exceptions import InvalidTaskError as InvalidTask
    from django_tasks.exceptions import TaskResultDoesNotExist
    from django_tasks.signals import task_enqueued, task_finished, task_started
    from django_tasks.utils import normalize_json

from .engine import submit
from .journal_ids import StepId
from .exceptions import Cancelled, InvalidInput
from .registry import TASK_PATH_VERSION
from .states import RunStatus
from .store import task_results as result_store
from .tasks_runtime import WORKER_STEP, resolve_task
from .types import RetryPolicy, Run

__all__ = ["DurableBackend", "DurableTask"]

# The keys a backend's OPTIONS may hold (documented in docs/tasks.md).
OPTION_KEYS = frozenset({"retry"})

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


def task_status(run: Run) -> TaskResultStatus:
    """The run's status as Django names it; a claimed run still waiting for a slot is READY, not RUNNING."""
    if run.status == RunStatus.RUNNING and run.attempt_started_at is None:
        return TaskResultStatus.READY
    return STATUS[run.status]


@dataclass(frozen=True, slots=True, kw_only=True)
class DurableTask(Task):
    """A Task with durable-django's own options: ``@task(retry=RetryPolicy(...))``.

    Options are dataclass fields, so ``Task.using()`` (which rebuilds the task
    from its fields) keeps them.
    """

    # This task's retry policy; the backend's OPTIONS["retry"] if None.
    retry: RetryPolicy | None = None


class DurableBackend(BaseTaskBackend):
    """Enqueues tasks as durable runs and reads their results from ``durable_run``.

    ``OPTIONS["retry"]``: a RetryPolicy, or a dict of its fields, applied to
    every task of this backend that sets none of its own; ``DURABLE["DEFAULT_RETRY"]``
    when absent.
    """

    task_class = DurableTask
    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias, params):
        super().__init__(alias, params)
        unknown = sorted(set(self.options) - OPTION_KEYS)
        if unknown:
            raise InvalidTaskBackend(
                f"TASKS[{alias!r}]['OPTIONS'] has unknown keys {unknown}; known: {sorted(OPTION_KEYS)}"
            )
        self.retry = _retry_option(alias, self.options.get("retry"))

    def validate_task(self, task):
        """Django's checks plus the task's own options; runs at import time, so no database access."""
        super().validate_task(task)
        retry = getattr(task, "retry", None)
        if retry is not None and not isinstance(retry, RetryPolicy):
            raise InvalidTask(f"retry of task {task.module_path} must be a durable_django.RetryPolicy")

    def enqueue(self, task, args, kwargs):
        """Insert a pending durable run for ``task(*args, **kwargs)``.

        Args:
            task: the task; its module path must import to it in every worker.
            args: positional arguments, JSON round-trippable.
            kwargs: keyword arguments, JSON round-trippable.

        Returns:
            A READY TaskResult whose ``id`` is the run id.

        Raises:
            InvalidTask: the task is invalid for this backend (queue, priority, path).
            TypeError, ValueError: an argument is not JSON (Django's own errors); nothing is written.
        """
        self.validate_task(task)
        _check_path(task)
        payload = json_value({"args": args, "kwargs": kwargs}, what="the arguments")
        run_after = task.run_after
        if run_after is not None and timezone.is_naive(run_after):
            run_after = timezone.make_aware(run_after)  # USE_TZ=False: the current time zone
        params = submit.build_task_run(
            task.module_path, payload, queue=task.queue_name, priority=task.priority, available_at=run_after,
            retry=getattr(task, "retry", None) or self.retry,
        )
        run = submit.insert_or_join(params)
        result = task_result(task, run, backend=self.alias, last_attempted_at=None, journal={})
        task_enqueued.send(type(self), task_result=result)
        return result

    def get_result(self, result_id):
        """The TaskResult of run ``result_id``, read from the database.

        Args:
            result_id: the ``id`` of a TaskResult this backend returned (the run id).

        Returns:
            The TaskResult as the run stands now.

        Raises:
            TaskResultDoesNotExist: no task run has that id (a durable function's run is not a task's).
            TaskPathError: the run's task path does not import in this process.
        """
        found = result_store.get_run_with_journal(str(result_id), version=TASK_PATH_VERSION)
        if found is None:
            raise TaskResultDoesNotExist(result_id)
        task = task_for_run(resolve_task(found.run.name), found.run)
        return task_result(task, found.run, backend=self.alias, last_attempted_at=found.claimed_at,
                           journal=found.journal)

    def check(self, **kwargs):
        """Runs live in durable_django's tables, so the app must be installed."""
        yield from super().check(**kwargs)
        if not apps.is_installed("durable_django"):
            yield checks.Error(
                f"TASKS[{self.alias!r}] uses DurableBackend, but durable_django is not in INSTALLED_APPS.",
                hint="Add 'durable_django' to INSTALLED_APPS and run migrate.",
                id="durable_django.E101",
            )


def _retry_option(alias: str, value) -> RetryPolicy | None:
    if value is None or isinstance(value, RetryPolicy):
        return value
    try:
        return RetryPolicy.from_json(value)
    except (InvalidInput, TypeError) as exc:
        raise InvalidTaskBackend(f"TASKS[{alias!r}]['OPTIONS']['retry'] is invalid: {exc}") from exc


def _check_path(task) -> None:
    """Workers find a task by importing its module path: it must lead back to this task."""
    try:
        found = resolve_task(task.module_path)
    except ImportError as exc:
        raise InvalidTask(str(exc)) from exc
    if found.func is not task.func:
        raise InvalidTask(f"{task.module_path} imports to another task; workers could not find this one")


def json_value(value, *, what: str):
    """``value`` as Django normalises it, refused unless it survives a JSON round trip.

    Django's ``normalize_json`` raises its own TypeError or ValueError for what
    JSON cannot hold; a ValueError here covers what it lets through but JSON
    would change (NaN, infinities, dict keys that are not strings).

    Args:
        value: task arguments or a return value.
        what: how error messages name it.

    Returns:
        The normalised value (tuples become lists, bytes become text).
    """
    normalized = normalize_json(value)
    try:
        decoded = json.loads(json.dumps(normalized, allow_nan=False))
    except ValueError as exc:
        raise ValueError(f"Unsupported value in {what}: {exc}") from None
    if decoded != normalized:
        raise ValueError(f"Unsupported value in {what}: it does not survive a JSON round trip "
                         "(is a dict key not a string?)")
    return normalized


def task_for_run(task, run: Run):
    """``task`` with the priority, queue and (while unclaimed) run_after its run was enqueued with.

    Args:
        task: the task its module path imports to.
        run: one of its runs.

    Returns:
        A copy of the task made with ``Task.using()``.
    """
    changes = {"priority": run.priority, "queue_name": run.queue}
    if run.status == RunStatus.PENDING and run.attempts == 0 and run.available_at is not None:
        changes["run_after"] = run.available_at
    return task.using(**changes)


def worker_ids(run: Run, journal: dict) -> list[str]:
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


def task_result(task, run: Run, *, backend: str, last_attempted_at: datetime | None, journal: dict) -> TaskResult:
    """The TaskResult a run stands for.

    Args:
        task: the task, as ``task_for_run`` rebuilds it.
        run: the run record.
        backend: the alias of the backend that reports it.
        last_attempted_at: when the latest attempt was claimed.
        journal: the run's journal, where each attempt recorded its worker.

    Returns:
        A TaskResult; ``errors`` holds the run's last error (and a cancellation error if it was cancelled).
    """
    payload = run.input if isinstance(run.input, dict) else {}
    errors = []
    if run.error:
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


def task_context(task, ctx) -> TaskContext:
    """The TaskContext of the attempt ``ctx`` belongs to.

    Its ``task_result`` is RUNNING and lists one worker per attempt so far, so
    ``context.attempt`` is ``ctx.attempt``.

    Args:
        task: the task being run.
        ctx: the engine's context of the attempt.

    Returns:
        The TaskContext handed to a ``takes_context`` task.
    """
    result = task_result(task_for_run(task, ctx.run), ctx.run, backend=task.backend,
                         last_attempted_at=ctx.claimed_at, journal=ctx.journal)
    return TaskContext(task_result=result)
