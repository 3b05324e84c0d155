"""Thousands of sleeping runs cost no worker slots, and all wake soon after their deadline."""

from __future__ import annotations

import time

from . import common
from .bench_e2e import enqueue_noops, succeeded
from .common import raw_connect, record, reset_tables

NOOPS = 2000
# The sleeper's sleep step (bench.sleeper), and the deadline its journal entry holds.
_NAP = "v1:nap:0"
_NAP_DEADLINE = "(result->>'at')::timestamptz"


def _landed_sleepers() -> int:
    with raw_connect() as conn:
        count: int = conn.execute(
            "SELECT count(*) FROM durable_run WHERE name = 'bench.sleeper' AND status = 'succeeded'"
        ).fetchone()[0]
    return count


def _journalled_naps() -> int:
    with raw_connect() as conn:
        count: int = conn.execute(f"SELECT count(*) FROM durable_step WHERE step_id = '{_NAP}'").fetchone()[0]
    return count


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
        # Every sleeper has gone to sleep once its nap is journalled. Waiting for them all to be asleep at
        # once never ended when putting them to sleep took longer than their sleep (a loaded machine).
        while _journalled_naps() < sleepers:
            time.sleep(0.1)
        common.stop(helpers)
        with raw_connect() as conn:
            left, deadline = conn.execute(
                f"SELECT extract(epoch FROM min({_NAP_DEADLINE}) - now()), max({_NAP_DEADLINE}) "
                f"FROM durable_step WHERE step_id = '{_NAP}'"
            ).fetchone()
            if left <= 0:
                print(
                    f"  note: the first sleepers woke {-left:.1f}s before the last went to sleep: "
                    "the rate with sleepers is measured beside fewer of them (see the count below); "
                    "give --sleep-seconds more time"
                )
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
        # Sleepers that woke before the measurement landed before ``base`` was read: count them by name.
        while _landed_sleepers() < sleepers:
            time.sleep(0.1)
        with raw_connect() as conn:
            # Each sleeper's lateness: from its own journalled deadline to its landing.
            p50, worst = conn.execute(f"""
                SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY late), max(late) FROM (
                    SELECT extract(epoch FROM r.finished_at - (s.result->>'at')::timestamptz) AS late
                    FROM durable_run r JOIN durable_step s ON s.run_id = r.run_id AND s.step_id = '{_NAP}'
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
