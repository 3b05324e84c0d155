"""durable-django: durable execution for Django on PostgreSQL.

The public surface is ``__all__``; everything else may change.
"""

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _version
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # what __getattr__ imports on first use, spelled out for type checkers
    from .api import (
        cancel,
        emit_signal,
        enqueue,
        enqueue_many,
        get_run,
        list_runs,
        purge_finished,
        resume,
        schedule,
        unschedule,
        wait_for_result,
    )
    from .exceptions import DurableError
    from .limits import Concurrency, Debounce, RateLimit
    from .registry import durable_function
    from .states import CancelOutcome, RunStatus
    from .types import RetryPolicy, Run, RunPage, Schedule

try:
    __version__ = _version("durable-django")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0.0.0"

__all__ = [
    "CancelOutcome",
    "Concurrency",
    "Debounce",
    "DurableError",
    "RateLimit",
    "RetryPolicy",
    "Run",
    "RunPage",
    "RunStatus",
    "Schedule",
    "cancel",
    "durable_function",
    "emit_signal",
    "enqueue",
    "enqueue_many",
    "get_run",
    "list_runs",
    "purge_finished",
    "resume",
    "schedule",
    "unschedule",
    "wait_for_result",
]

_LAZY = {
    "CancelOutcome": "states",
    "RunStatus": "states",
    "DurableError": "exceptions",
    "RetryPolicy": "types",
    "Run": "types",
    "RunPage": "types",
    "Schedule": "types",
    "durable_function": "registry",
    "Concurrency": "limits",
    "Debounce": "limits",
    "RateLimit": "limits",
    "cancel": "api",
    "emit_signal": "api",
    "enqueue": "api",
    "enqueue_many": "api",
    "get_run": "api",
    "list_runs": "api",
    "purge_finished": "api",
    "resume": "api",
    "wait_for_result": "api",
    "schedule": "api",
    "unschedule": "api",
}


def __getattr__(name: str) -> object:
    # Lazy, so importing the package (INSTALLED_APPS, settings) never touches the app registry.
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'durable_django' has no attribute {name!r}")
    from importlib import import_module

    return getattr(import_module(f".{module}", __name__), name)
