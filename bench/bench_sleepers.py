"""Thousands of sleeping runs cost no worker slots, and all wake soon after their deadline."""

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
    print(f"{sleepers} runs asleep for {seconds:.0f}s, worker --concurrency 4", flush=True)
    reset_tables()
    worker = common.spawn(common.worker_command(4))
    try:
        noop_rate(0)  # warm-up: connections, prepared statements, caches
        with raw_connect() as conn:
            conn.execute("VACUUM ANALYZE durable_run, durable_step")  # the same statistics as the second round
        alone = noop_rate(NOOPS)
        # Put the sleepers to sleep with burst helpers, so the measured worker starts from an empty queue.
        enqueue_noops(sleepers, "bench.sleeper", {"seconds": seconds})
        helpers = [common.spawn(common.worker_command(4, "--burst")) for _ in range(2)]
        while common.status_counts().get("waiting", 0) < sleepers:
            time.sleep(0.1)
        common.stop(helpers)
        with raw_connect() as conn:
            left = conn.execute(
                "SELECT extract(epoch FROM min(available_at) - now()) FROM durable_run WHERE status = 'waiting'"
            ).fetchone()[0]
            # The last deadline, read while every sleeper is still asleep.
            deadline = conn.execute("SELECT max(available_at) FROM durable_run WHERE status = 'waiting'").fetchone()[0]
            # Putting them to sleep left three row versions per run: vacuum it now, as autovacuum
            # would within a minute, so the comparison measures sleeping runs, not the vacuum.
            conn.execute("VACUUM ANALYZE durable_run, durable_step")
        base = succeeded()
        with_sleepers = noop_rate(base)
        with raw_connect() as conn:
            still = conn.execute(
                "SELECT count(*) FROM durable_run WHERE name = 'bench.sleeper' AND status = 'waiting'"
            ).fetchone()[0]
        record(
            f"no-op rate with {sleepers} asleep / without",
            f"{with_sleepers:.0f} vs {alone:.0f} runs/s",
            f"{with_sleepers / alone:.2f}",
            "~1.0",
        )
        if still < sleepers:
            print(f"  note: {sleepers - still} sleepers woke during the measurement ({left:.1f}s of sleep was left)")
        while common.status_counts().get("succeeded", 0) < base + NOOPS + sleepers:
            time.sleep(0.1)
        with raw_connect() as conn:
            # Each sleeper's lateness: from its own journalled deadline to its landing.
            p50, worst = conn.execute("""
                SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY late), max(late) FROM (
                    SELECT extract(epoch FROM r.finished_at - (s.result->>'at')::timestamptz) AS late
                    FROM durable_run r JOIN durable_step s ON s.run_id = r.run_id AND s.step_id = 'v1:nap:0'
                    WHERE r.name = 'bench.sleeper') lateness""").fetchone()
            last = conn.execute(
                "SELECT extract(epoch FROM max(finished_at) - %s::timestamptz) FROM durable_run "
                "WHERE name = 'bench.sleeper'",
                [deadline],
            ).fetchone()[0]
        record(
            f"{sleepers} sleepers woken: deadline to landing",
            f"p50 {float(p50) * 1000:.0f} ms, "
            f"max {float(worst):.2f} s; last one {float(last):.2f} s after the last deadline",
            "",
            "seconds",
        )
    finally:
        common.stop([worker])
