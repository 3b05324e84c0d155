"""Execute claimable runs in the calling thread (durable_django.testing.run_until_idle)."""

from __future__ import annotations

from ..engine import execute as executor
from ..engine import lifecycle, time_limits


def drain(
    *,
    functions: list[str] | None = None,
    queues: list[str] | None = None,
    tenant_id: str | None = None,
    max_runs: int = 10_000,
) -> int:
    bounds = lifecycle.claim_bounds(functions=functions, queues=queues, tenant_id=tenant_id)
    while time_limits.expire_past_deadlines() == time_limits.SWEEP_BATCH:
        pass
    executed = 0
    while executed < max_runs:
        claimed = lifecycle.claim(limit=1, start_now=1, worker_id="inline", bounds=bounds)
        if not claimed:
            return executed
        executor.execute(claimed[0])
        executed += 1
    raise RuntimeError(f"run_until_idle executed {max_runs} attempts and runs were still claimable")
