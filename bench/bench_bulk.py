"""A bulk cancel by filter: every batch set-based vs the run-by-run loop it replaced.

Both sides run the package's own bulk operation (``start_bulk("cancel", {"name": ...})``, its steps
executed in this process as a worker would) over pending runs enqueued with ``enqueue_many``. The
set-based side is the bulk operation as it is, on ``--bulk-runs`` matching runs (100,000 by default).
The baseline is the same durable run with each batch acting as the operation did before, one
``api.cancel`` per run (its own transaction), on ``--bulk-baseline-runs`` matching runs (10,000 by
default: at its rate 100,000 take ten minutes or more, and its cost per run does not grow with the
count). Each side starts from an empty table; two rounds each, alternating (A B B A), the best round of
each side compared, in runs cancelled per second.
"""

from __future__ import annotations

import time
from typing import Any

from . import common
from .common import record, reset_tables

ENQUEUE_CHUNK = 10_000
ROUNDS = 2


def _pending(n: int) -> None:
    from durable_django import api

    for start in range(0, n, ENQUEUE_CHUNK):
        api.enqueue_many("bench.noop", [{"n": index} for index in range(start, min(n, start + ENQUEUE_CHUNK))])
    with common.raw_connect() as conn:
        conn.execute("VACUUM ANALYZE durable_run")


def _one_by_one(bulk_run_id: str, operation: str, filters: dict[str, Any], cursor: str | None) -> dict[str, Any]:
    """A batch as the bulk operation acted before: one cancel (one transaction) per run."""
    from durable_django import api
    from durable_django.api.bulk import BULK_FUNCTION

    page = api.list_runs(**filters, limit=500, cursor=cursor)
    outcomes: dict[str, int] = {}
    for run in page.items:
        if run.name == BULK_FUNCTION:
            continue
        outcome = api.cancel(run.run_id).value
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
    return {"outcomes": outcomes, "next_cursor": page.next_cursor}


def _bulk_cancel(n: int) -> float:
    """Runs cancelled per second by one bulk cancel of ``n`` matching runs, from its start to its end."""
    from durable_django import api
    from durable_django.api.bulk import BULK_FUNCTION, start_bulk
    from durable_django.testing import run_until_idle

    reset_tables()
    _pending(n)
    began = time.perf_counter()
    bulk = start_bulk("cancel", {"name": "bench.noop"})
    run_until_idle(functions=[BULK_FUNCTION])
    elapsed = time.perf_counter() - began
    done = api.get_run(bulk.run_id)
    assert done.status == "succeeded" and done.output["outcomes"] == {"cancelled": n}, (done.status, done.output)
    return n / elapsed


def main(runs: int, baseline_runs: int) -> None:
    from durable_django import durable

    print(f"bulk cancel: {runs:,} runs set-based, {baseline_runs:,} run by run, {ROUNDS} rounds each", flush=True)
    set_based_batch = durable._batch

    def one_by_one_round() -> float:
        durable._batch = _one_by_one
        try:
            return _bulk_cancel(baseline_runs)
        finally:
            durable._batch = set_based_batch

    rates: dict[str, list[float]] = {"set-based": [], "run by run": []}
    # The sides alternate (A B B A), so a change in the machine's load weighs on both.
    for side in ["set-based", "run by run", "run by run", "set-based"][: 2 * ROUNDS]:
        rate = _bulk_cancel(runs) if side == "set-based" else one_by_one_round()
        rates[side].append(rate)
        print(f"  {side}: {rate:,.0f} runs/s", flush=True)
    set_based, one_by_one = max(rates["set-based"]), max(rates["run by run"])
    record(
        f"bulk cancel of {runs:,} matching runs (batches of {durable.BATCH})",
        f"{set_based:,.0f} runs/s ({runs / set_based:.1f} s) vs run by run {one_by_one:,.0f} runs/s "
        f"({runs / one_by_one:.0f} s for {runs:,} at that rate); best of {ROUNDS} rounds each",
        f"{set_based / one_by_one:.1f}x",
        ">= 10x",
    )
