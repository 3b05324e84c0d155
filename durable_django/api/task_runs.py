"""Runs named by an import path, for the Django Tasks plug-in: enqueue one, read one back with its journal."""

from __future__ import annotations

from datetime import datetime

from ..engine import submit
from ..exceptions import InvalidInput
from ..registry import TASK_PATH_VERSION
from ..storable import name
from ..store import task_results
from ..store.task_results import RunWithJournal
from ..submission import RunOptions
from ..types import RetryPolicy, Run

__all__ = ["RunWithJournal", "enqueue", "get"]


def enqueue(
    path: str,
    payload: object,
    *,
    queue: str,
    priority: int,
    available_at: datetime | None,
    retry: RetryPolicy | None,
) -> Run:
    """Insert a pending version-0 run of the task at ``path`` with ``payload`` as its input."""
    options = RunOptions.of(queue=queue, priority=priority, available_at=available_at, retry=retry)
    return submit.submit(submit.task_request(path, payload, options))


def get(run_id: str) -> RunWithJournal | None:
    """The task run ``run_id`` with its latest claim time and journal; None if there is no such task run.

    An id no run can have (not a storable name: from a URL, it may hold anything) is no such task run.
    """
    try:
        valid_id = name(run_id, what="a task result id")
    except InvalidInput:
        return None
    return task_results.get_run_with_journal(valid_id, version=TASK_PATH_VERSION)
