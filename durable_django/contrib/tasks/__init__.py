"""The Django Tasks plug-in: ``DurableBackend`` and the runtime that runs its tasks in ``durable_worker``.

``compat`` finds the framework (Django 6 or the backport), ``backend`` is the
task backend, ``results`` maps runs to ``TaskResult``, ``paths`` resolves task
paths and ``runtime`` runs a task as one attempt. The app config installs the
runtime where the tasks framework is installed.
"""

from __future__ import annotations

from importlib.util import find_spec


def framework_installed() -> bool:
    """Is Django's tasks framework importable here (``django.tasks``, or the ``django_tasks`` backport)?"""
    return any(find_spec(name) is not None for name in ("django.tasks", "django_tasks"))


def install() -> None:
    """Make runs named by an import path (the backend's) runnable in this process."""
    from ...flow_control import add_queue_limit_source
    from ...registry import registry
    from .backend import declared_queue_limits
    from .runtime import task_handler

    registry.set_path_resolver(task_handler)
    add_queue_limit_source(declared_queue_limits)
