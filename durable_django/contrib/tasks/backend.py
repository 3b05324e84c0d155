"""``DurableBackend``: Django's Tasks framework backed by durable runs.

A task enqueued here is an ordinary durable run named by the task's module
path, with version 0 and input ``{"args": [...], "kwargs": {...}}``: visible in
the admin, cancellable, retried per a :class:`~durable_django.RetryPolicy`, and
executed by ``manage.py durable_worker`` (see ``runtime``). Results are read
back from ``durable_run`` (see ``results``). Works with ``django.tasks``
(Django 6) and with the ``django_tasks`` backport (Django 5.2).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, ParamSpec, Self, TypeVar, cast

from django.apps import apps
from django.conf import settings
from django.core import checks
from django.utils import timezone
from django.utils.module_loading import import_string

from ...api import task_runs
from ...exceptions import InvalidInput
from ...flow_control import QueueLimits, queue_limits, strictest
from ...types import RetryPolicy
from .compat import (
    BaseTaskBackend,
    InvalidTask,
    InvalidTaskBackend,
    Task,
    TaskResult,
    TaskResultDoesNotExist,
    task_backends,
    task_enqueued,
)
from .paths import resolve_task
from .results import json_value, task_for_run, task_result

__all__ = ["DurableBackend", "DurableTask"]

logger = logging.getLogger("durable_django.tasks")

# The keys a backend's OPTIONS may hold (documented in docs/tasks.md).
OPTION_KEYS = frozenset({"retry", "queues"})

_P = ParamSpec("_P")
_R = TypeVar("_R")


# Task is generic only in its stubs: Django's class (and the backport's, under Django 6's name) cannot be
# subscripted at run time, so the base stays bare.
@dataclass(frozen=True, slots=True, kw_only=True)
class DurableTask(Task):  # type: ignore[type-arg]
    """A Task with durable-django's own options: ``@task(retry=RetryPolicy(...))``, or
    ``task(f).using(retry=...)`` on Django 6.0.

    Options are dataclass fields, so ``Task.using()`` (which rebuilds the task
    from its fields) keeps them.
    """

    # This task's retry policy; the backend's OPTIONS["retry"] if None.
    retry: RetryPolicy | None = None

    def using(self, *, retry: RetryPolicy | None = None, **changes: Any) -> Self:
        """Django's ``using()``, which also sets ``retry``: unchanged where None, as Django's options are.

        Django 6.0's ``@task`` passes no keyword beyond its own to the task class (6.1 and the
        backport do), so ``task(f).using(retry=...)`` is how a task gets its own policy there.
        """
        # super() with arguments: a slots dataclass is a new class, which bare super() does not see. The
        # stubs type Django's using() as returning a Task; it returns a copy of this class.
        changed = cast(Self, super(DurableTask, self).using(**changes))
        return changed if retry is None else dataclasses.replace(changed, retry=retry)


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

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        unknown = sorted(set(self.options) - OPTION_KEYS)
        if unknown:
            raise InvalidTaskBackend(
                f"TASKS[{alias!r}]['OPTIONS'] has unknown keys {unknown}; known: {sorted(OPTION_KEYS)}"
            )
        self.retry = _retry_option(alias, self.options.get("retry"))
        try:
            # {"emails": {"concurrency": 5, "rate_limit": (50, 1.0)}}: limits of this backend's queues,
            # enforced across every worker like DURABLE["QUEUES"] (the stricter applies where both say).
            self.queue_limits = queue_limits(self.options.get("queues"), what=f"TASKS[{alias!r}]['OPTIONS']['queues']")
        except InvalidInput as exc:
            raise InvalidTaskBackend(str(exc)) from exc

    def validate_task(self, task: Task[..., Any]) -> None:
        """Django's checks plus the task's own options; runs at import time, so no database access."""
        super().validate_task(task)
        retry = getattr(task, "retry", None)
        if retry is not None and not isinstance(retry, RetryPolicy):
            raise InvalidTask(f"retry of task {task.module_path} must be a durable_django.RetryPolicy")

    def enqueue(self, task: Task[_P, _R], args: list[Any], kwargs: dict[str, Any]) -> TaskResult[_P, _R]:
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
        run = task_runs.enqueue(
            task.module_path,
            payload,
            queue=task.queue_name,
            priority=task.priority,
            available_at=run_after,
            retry=getattr(task, "retry", None) or self.retry,
        )
        result = task_result(task, run, backend=self.alias, last_attempted_at=None, journal={})
        task_enqueued.send(type(self), task_result=result)
        return result

    def get_result(self, result_id: str) -> TaskResult[..., Any]:
        """The TaskResult of run ``result_id``, read from the database.

        Args:
            result_id: the ``id`` of a TaskResult this backend returned (the run id).

        Returns:
            The TaskResult as the run stands now.

        Raises:
            TaskResultDoesNotExist: no task run has that id (a durable function's run is not a task's).
            TaskPathError: the run's task path does not import in this process.
        """
        found = task_runs.get(str(result_id))
        if found is None:
            raise TaskResultDoesNotExist(result_id)
        task = task_for_run(resolve_task(found.run.name), found.run)
        return task_result(
            task,
            found.run,
            backend=self.alias,
            last_attempted_at=found.claimed_at,
            journal=found.journal,
            attempt_errors=found.attempt_errors,
        )

    # django-stubs types check() as returning a list; Django's own check_tasks consumes it with
    # ``yield from`` (and the backport types it as an Iterable), so a generator is what it accepts.
    def check(self, **kwargs: Any) -> Iterator[checks.CheckMessage]:  # type: ignore[override]
        """Runs live in durable_django's tables, so the app must be installed."""
        yield from super().check(**kwargs)
        if not apps.is_installed("durable_django"):
            yield checks.Error(
                f"TASKS[{self.alias!r}] uses DurableBackend, but durable_django is not in INSTALLED_APPS.",
                hint="Add 'durable_django' to INSTALLED_APPS and run migrate.",
                id="durable_django.E101",
            )


def _retry_option(alias: str, value: object) -> RetryPolicy | None:
    if value is None or isinstance(value, RetryPolicy):
        return value
    if not isinstance(value, Mapping):
        # RetryPolicy.from_json() took a falsy non-dict (0, "", []) for no fields at all: the default policy.
        raise InvalidTaskBackend(
            f"TASKS[{alias!r}]['OPTIONS']['retry'] is invalid: give a RetryPolicy or a dict of its fields, "
            f"got {value!r}"
        )
    try:
        return RetryPolicy.from_json(value)
    except (InvalidInput, TypeError) as exc:
        raise InvalidTaskBackend(f"TASKS[{alias!r}]['OPTIONS']['retry'] is invalid: {exc}") from exc


def _check_path(task: Task[..., Any]) -> None:
    """Workers find a task by importing its module path: it must lead back to this task."""
    try:
        found = resolve_task(task.module_path)
    except ImportError as exc:
        raise InvalidTask(str(exc)) from exc
    if found.func is not task.func:
        raise InvalidTask(f"{task.module_path} imports to another task; workers could not find this one")


def declared_queue_limits() -> dict[str, QueueLimits]:
    """The queue limits every configured DurableBackend declares in its ``OPTIONS["queues"]``.

    Read at every claim, so an alias of another backend is never instantiated here, and an alias that
    cannot be (a typo in its BACKEND or OPTIONS, which its system check reports) is left out with an
    error logged, rather than failing every claim of every worker.
    """
    declared = []
    for alias, config in getattr(settings, "TASKS", {}).items():
        try:
            if not issubclass(import_string(config["BACKEND"]), DurableBackend):
                continue
            backend = task_backends[alias]
        except Exception as exc:  # noqa: BLE001 - any misconfiguration of one alias leaves the others working
            if alias not in _reported_broken:
                _reported_broken.add(alias)
                logger.error("TASKS[%r] is left out of the queue limits: %s", alias, exc)
            continue
        if isinstance(backend, DurableBackend):
            declared.append(backend.queue_limits)
    return strictest(*declared)


# Aliases already reported broken (once per process: the claim loop asks at every claim).
_reported_broken: set[str] = set()
