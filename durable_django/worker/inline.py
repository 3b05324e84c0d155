"""Execute claimable runs in the calling thread (durable_django.testing.run_until_idle)."""

from __future__ import annotations

from ..engine import execute as executor
from .loop import WorkerOptions, claim_batch, claim_bounds


def drain(*, functions=None, queues=None, tenant_id=None, max_runs: int = 10_000) -> int:
    options = WorkerOptions(concurrency=1, functions=functions, queues=queues, tenant_id=tenant_id,
                            worker_id="inline")
    bounds = claim_bounds(options)
    executed = 0
    while executed < max_runs:
        claimed = claim_batch(1, options.worker_id, bounds)
        if not claimed:
            return executed
        executor.execute(claimed[0])
        executed += 1
    raise RuntimeError(f"run_until_idle executed {max_runs} attempts and runs were still claimable")
