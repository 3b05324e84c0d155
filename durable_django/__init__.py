"""durable-django: durable execution for Django on PostgreSQL.

The public surface is ``__all__``; everything else may change.
"""

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _version
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # what __getattr__ imports on first use, spelled out for type checkers
    from .api import (
        aread_stream,
        backfill,
        cancel,
        emit_signal,
        enqueue,
        enqueue_many,
        fork,
        get_event,
        get_run,
        list_attempts,
        list_events,
        list_pauses,
        list_runs,
        pause,
        purge_finished,
        read_stream,
        resume,
        schedule,
        unpause,
        unschedule,
        wait_for_result,
    )
    from .exceptions import DurableError
    from .flow_control import Concurrency, Debounce, RateLimit
    from .registry import durable_function
    from .states import CancelOutcome, RunStatus
    from .types import AttemptRecord, Pause, RetryPolicy, Run, RunPage, Schedule, StreamItem

try:
    __version__ = _version("durable-django")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0.0.0"

__all__ = [
    "AttemptRecord",
    "CancelOutcome",
    "Concurrency",
    "Debounce",
    "DurableError",
    "Pause",
    "RateLimit",
    "RetryPolicy",
    "Run",
    "RunPage",
    "RunStatus",
    "Schedule",
    "StreamItem",
    "aread_stream",
    "backfill",
    "cancel",
    "durable_function",
    "emit_signal",
    "enqueue",
    "enqueue_many",
    "fork",
    "get_event",
    "get_run",
    "list_attempts",
    "list_events",
    "list_pauses",
    "list_runs",
    "pause",
    "purge_finished",
    "read_stream",
    "resume",
    "schedule",
    "unpause",
    "unschedule",
    "wait_for_result",
]

_LAZY = {
    "CancelOutcome": "states",
    "RunStatus": "states",
    "DurableError": "exceptions",
    "AttemptRecord": "types",
    "RetryPolicy": "types",
    "Pause": "types",
    "Run": "types",
    "RunPage": "types",
    "Schedule": "types",
    "StreamItem": "types",
    "durable_function": "registry",
    "Concurrency": "flow_control",
    "Debounce": "flow_control",
    "RateLimit": "flow_control",
    "aread_stream": "api",
    "backfill": "api",
    "cancel": "api",
    "get_event": "api",
    "list_events": "api",
    "read_stream": "api",
    "emit_signal": "api",
    "enqueue": "api",
    "enqueue_many": "api",
    "fork": "api",
    "get_run": "api",
    "list_attempts": "api",
    "list_pauses": "api",
    "list_runs": "api",
    "pause": "api",
    "unpause": "api",
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
