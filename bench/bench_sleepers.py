"""Issue 4: thousands of sleeping runs cost no worker slots, and all wake soon after their deadline."""

from __future__ import annotations

import time

from . import common
from .bench_e2e import enqueue_noops, succeeded
from .common import raw_connect, record, reset_tables

NOOPS = 2000


def noop_rate(worker_pool_busy_before: int) -> float:
    """No-op runs/s of the worker; the runs come due together so enqueueing does not pace it."""
    from durable_django import api

    for _ in range(NOOPS):
        api.enqueue("bench.noop", delay=4)
    return common.rate_while_draining(lambda: succeeded() - worker_pool_busy_before, NOOPS)


def main(sleepers: int, seconds: float) -> None:
    print(f"issue 4: {sleepers} runs asleep for {seconds:.0f}s, worker --concurrency 4", flush=True)
    reset_tables()
    worker = common.spawn(common.worker_command(4))
    try:
        alone = noop_rate(0)
        # Put the sleepers to sleep with burst helpers, so the measured worker starts from an empty queue.
        enqueue_noops(sleepers, "bench.sleeper", {"seconds": seconds})
        helpers = [common.spawn(common.worker_command(4, "--burst")) for _ in range(2)]
        while common.status_counts().get("waiting", 0) < sleepers:
            time.sleep(0.1)
        common.stop(helpers)
        with raw_connect() as conn:
            left = conn.execute("SELECT extract(epoch FROM min(available_at) - now()) FROM durable_run "
                                "WHERE status = 'waiting'").fetchone()[0]
        base = succeeded()
        with_sleepers = noop_rate(base)
        with raw_connect() as conn:
            still = conn.execute("SELECT count(*) FROM durable_run WHERE name = 'bench.sleeper' "
                                 "AND status = 'waiting'").fetchone()[0]
        record(f"no-op rate with {sleepers} asleep / without", f"{with_sleepers:.0f} vs {alone:.0f} runs/s",
               f"{with_sleepers / alone:.2f}", "~1.0")
        if still < sleepers:
            print(f"  note: {sleepers - still} sleepers woke during the measurement ({left:.1f}s of sleep was left)")
        with raw_connect() as conn:
            deadline = conn.execute("SELECT max(available_at) FROM durable_run WHERE status = 'waiting'").fetchone()[0]
        while common.status_counts().get("succeeded", 0) < base + NOOPS + sleepers:
            time.sleep(0.1)
        with raw_connect() as conn:
            late = conn.execute("SELECT extract(epoch FROM max(finished_at) - %s) FROM durable_run "
                                "WHERE name = 'bench.sleeper'", [deadline]).fetchone()[0]
        record(f"{sleepers} sleepers: last deadline to last finished", f"{float(late):.1f} s", "", "seconds")
    finally:
        common.stop([worker])
