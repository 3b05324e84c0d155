"""The one place that knows where Django's tasks framework lives: ``django.tasks`` (Django 6) or the
``django_tasks`` backport (Django 5.2). Everything else imports these names from here.
"""

try:  # Django 6 ships the framework.
    from django.tasks import TaskContext, TaskResult, TaskResultStatus, task_backends
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import Task, TaskError
    from django.tasks.exceptions import InvalidTask, InvalidTaskBackend, TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued, task_finished, task_started
    from django.utils.json import normalize_json
except ImportError:  # Django 5.2: the django-tasks backport.
    # mypy types every name from the branch above (django-stubs ships stubs for django.tasks whichever
    # Django is installed), so the plug-in is checked against Django 6's API. To mypy the backport's
    # classes are other classes of the same API ([assignment]); under Django 6, where the backport is not
    # installed, pyproject.toml's override makes django_tasks untyped and each name a redefinition
    # ([no-redef]). Each environment uses only some of these ignores: the override allows the rest.
    from django_tasks import (  # type: ignore[assignment, no-redef]
        TaskContext,
        TaskResult,
        TaskResultStatus,
        task_backends,
    )
    from django_tasks.backends.base import BaseTaskBackend  # type: ignore[assignment, no-redef]
    from django_tasks.base import Task, TaskError  # type: ignore[assignment, no-redef]
    from django_tasks.exceptions import (  # type: ignore[assignment, no-redef]
        InvalidTaskBackendError as InvalidTaskBackend,
    )
    from django_tasks.exceptions import InvalidTaskError as InvalidTask  # type: ignore[assignment, no-redef]
    from django_tasks.exceptions import TaskResultDoesNotExist  # type: ignore[assignment, no-redef]
    from django_tasks.signals import task_enqueued, task_finished, task_started  # type: ignore[no-redef]
    from django_tasks.utils import normalize_json  # type: ignore[no-redef]

__all__ = [
    "BaseTaskBackend",
    "InvalidTask",
    "InvalidTaskBackend",
    "Task",
    "TaskContext",
    "TaskError",
    "TaskResult",
    "TaskResultDoesNotExist",
    "TaskResultStatus",
    "normalize_json",
    "task_backends",
    "task_enqueued",
    "task_finished",
    "task_started",
]
