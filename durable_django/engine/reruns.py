"""Retrying a finished run as a new run: same function, version, input, tenant, queue, priority and retry policy.

The new run starts with an empty journal. The old run's keys are not carried over
(they would join the old run); an idempotency key given makes a retry asked twice
make one run.
"""

from __future__ import annotations

from ..exceptions import InvalidInput
from ..registry import TASK_PATH_VERSION
from ..submission import RunOptions
from ..types import Run
from . import submit


def retry_as_new(run: Run, *, idempotency_key: str | None = None) -> Run:
    """A new run of finished ``run``'s function and input (or the run ``idempotency_key`` already names).

    Raises:
        InvalidInput: the run has not finished.
    """
    if run.is_live:
        raise InvalidInput(
            f"run {run.run_id} is still {run.status}; only a finished run can be retried", run_id=run.run_id
        )
    if run.version == TASK_PATH_VERSION:
        options = RunOptions.of(queue=run.queue, priority=run.priority, retry=run.retry_policy)
        return submit.submit(submit.task_request(run.name, run.input, options, idempotency_key=idempotency_key))
    options = RunOptions.of(
        version=run.version, tenant_id=run.tenant_id, queue=run.queue, priority=run.priority, retry=run.retry_policy
    )
    return submit.submit(submit.request(run.name, run.input, options, idempotency_key=idempotency_key))
