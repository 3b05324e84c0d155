"""Which Django task an import path names, and whether this process may import it to find out."""

from __future__ import annotations

import sys
from typing import Any

from django.apps import apps
from django.utils.module_loading import import_string

from .compat import Task


class TaskPathError(ImportError):
    """A Django Tasks run names a path that does not import here, or that names no task."""


def resolve_task(path: str) -> Task[..., Any]:
    """The Django task at import path ``path``.

    Raises:
        TaskPathError: the path does not import (whatever the module raised), or is not a task.
    """
    module = path.rpartition(".")[0]
    if module not in sys.modules and not _in_an_installed_app(module):
        # Importing runs a module's code: only a module of the project's own apps may be imported on
        # the word of a stored run (Django Tasks runs are only ever made from a task object).
        raise TaskPathError(f"task path {path!r} is not inside an installed app; it is not imported")
    try:
        target = import_string(path)
    except Exception as exc:  # a module that fails to import is the same clear error, whatever it raised
        raise TaskPathError(f"task path {path!r} does not import in this process: {exc!r}") from exc
    if not isinstance(target, Task):
        raise TaskPathError(f"task path {path!r} names a {type(target).__name__}, not a Django task")
    return target


def _in_an_installed_app(module: str) -> bool:
    return any(module == app.name or module.startswith(app.name + ".") for app in apps.get_app_configs())
