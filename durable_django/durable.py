"""The package's own durable functions, registered like any app's: the bulk operation by filter."""

from __future__ import annotations

from typing import Any

from .api.bulk import BULK_FUNCTION, bulk_filters
from .engine import bulk_batch
from .registry import durable_function
from .types import RetryPolicy

# Runs read and acted on per step, in one transaction of a few statements.
BATCH = 500


def _batch(bulk_run_id: str, operation: str, filters: dict[str, Any], cursor: str | None) -> dict[str, Any]:
    # The filters were checked when the operation began; checked again, as they come back from the run's input.
    listed, next_cursor = bulk_batch.page(bulk_filters(filters), cursor, BATCH)
    runs = [run for run in listed if run.name != BULK_FUNCTION]  # never itself, nor another bulk operation
    return {"outcomes": bulk_batch.act(bulk_run_id, operation, runs), "next_cursor": next_cursor}


@durable_function(BULK_FUNCTION, retry=RetryPolicy(max_attempts=10, initial_delay=1.0, max_delay=30.0))
def bulk_operation(ctx: Any, input: dict[str, Any]) -> dict[str, Any]:
    """Apply ``input["operation"]`` to every run ``input["filters"]`` match, newest first, a batch per step.

    The runs are read by keyset (newest first) from where the last batch stopped, so runs enqueued after it
    began (the retries it makes among them) are never reached; its progress says how far it got.
    """
    operation, filters = input["operation"], input["filters"]
    totals: dict[str, int] = {}
    cursor: str | None = None
    batches = 0
    while True:
        done = ctx.step("batch", lambda after=cursor: _batch(ctx.run_id, operation, filters, after), occurrence=batches)
        batches += 1
        for outcome, count in done["outcomes"].items():
            totals[outcome] = totals.get(outcome, 0) + count
        ctx.set_progress({"operation": operation, "batches": batches, "runs": sum(totals.values()), **totals})
        cursor = done["next_cursor"]
        if cursor is None:
            return {"operation": operation, "runs": sum(totals.values()), "outcomes": totals}
