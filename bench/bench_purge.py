"""Purge a large table of finished runs while enqueue and claim go on.

Makes ``--runs`` finished runs with ``--steps`` journal entries each (one
INSERT ... SELECT generate_series per chunk), measures an enqueue+claim+complete
loop on its own, then purges in batches of ``--batch-size`` while the same loop
runs in a second thread. Reports purge rows/s and the loop's rate during the
purge as a ratio to its rate without it.

Usage: ``python bench/bench_purge.py [--runs 1000000] [--steps 3] [--batch-size 1000]``
(an embedded pgserver in a temporary directory when DATABASE_URL is unset; the
durable tables of the server it uses are emptied).
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from datetime import timedelta

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.common import print_table, raw_connect, record, reset_tables, setup_django

CHUNK = 100_000

# Finished runs landed two days ago, one millisecond apart, each with its journal.
MAKE_FINISHED = """
WITH made AS (
    INSERT INTO durable_run (run_id, name, status, input, output, retry_policy, attempts,
                             created_at, updated_at, started_at, finished_at)
    SELECT 'old-' || i, 'bench.noop', 'succeeded', '{"n": 1}', 'null', '{}', 1,
           now() - interval '2 days' - make_interval(secs => i / 1000.0 + 1),
           now() - interval '2 days' - make_interval(secs => i / 1000.0),
           now() - interval '2 days' - make_interval(secs => i / 1000.0 + 1),
           now() - interval '2 days' - make_interval(secs => i / 1000.0)
    FROM generate_series(%(first)s::int, %(last)s::int) i
    RETURNING run_id, created_at
)
INSERT INTO durable_step (run_id, step_id, result, created_at)
SELECT run_id, 'v1:noop:' || n, 'null', created_at FROM made, generate_series(0, %(steps)s::int - 1) n
"""


class ClaimLoop(threading.Thread):
    """Enqueue one run, claim it, complete it, again and again, on a connection of its own."""

    def __init__(self):
        super().__init__(daemon=True)
        self.stop_event = threading.Event()
        self.done = 0
        self.error: BaseException | None = None

    def run(self):
        from django.db import connections

        from durable_django import api
        from durable_django.store import landing
        from durable_django.testing import claim

        try:
            while not self.stop_event.is_set():
                api.enqueue("bench.noop")
                for run in claim(limit=1, functions=["bench.noop"], worker_id="bench"):
                    landing.complete_many([landing.Finished(run.run_id, run.attempts, "null", None)])
                    self.done += 1
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            self.error = exc
        finally:
            connections.close_all()

    def sample(self) -> tuple[float, int]:
        return time.perf_counter(), self.done


def make_finished(runs: int, steps: int) -> float:
    started = time.perf_counter()
    with raw_connect() as conn:
        for first in range(1, runs + 1, CHUNK):
            conn.execute(MAKE_FINISHED, {"first": first, "last": min(first + CHUNK - 1, runs), "steps": steps})
            print(f"  made {min(first + CHUNK - 1, runs)} finished runs", flush=True)
        conn.execute("VACUUM ANALYZE durable_run")
        conn.execute("VACUUM ANALYZE durable_step")
    return time.perf_counter() - started


def loop_rate(loop: ClaimLoop, seconds: float) -> float:
    t0, n0 = loop.sample()
    time.sleep(seconds)
    t1, n1 = loop.sample()
    return (n1 - n0) / (t1 - t0)


def purge(batch_size: int) -> tuple[int, int, float, float]:
    """Purge like api.purge_finished, batch by batch; returns (runs, batches, seconds, slowest batch)."""
    from django.utils import timezone

    from durable_django.store import purge as purge_store

    cutoff = timezone.now() - timedelta(days=1)
    deleted = batches = 0
    slowest = 0.0
    position = None
    started = time.perf_counter()
    while True:
        batch_started = time.perf_counter()
        count, position = purge_store.purge_batch(cutoff, batch_size, position)
        slowest = max(slowest, time.perf_counter() - batch_started)
        deleted += count
        batches += 1
        if batches % 100 == 0:
            print(f"  {batches} batches, {deleted} runs purged", flush=True)
        if position is None:
            return deleted, batches, time.perf_counter() - started, slowest


def main(runs: int, steps: int, batch_size: int, baseline_seconds: float) -> None:
    print(
        f"purge {runs} finished runs x {steps} steps in batches of {batch_size}, "
        "with an enqueue+claim+complete loop beside it",
        flush=True,
    )
    reset_tables()
    made = make_finished(runs, steps)
    record("make finished runs (INSERT ... SELECT)", f"{runs} runs + {runs * steps} steps in {made:.1f}s")

    loop = ClaimLoop()
    loop.start()
    time.sleep(1.0)  # warm up
    baseline = loop_rate(loop, baseline_seconds)

    t0, n0 = loop.sample()
    deleted, batches, elapsed, slowest = purge(batch_size)
    t1, n1 = loop.sample()
    during = (n1 - n0) / (t1 - t0)
    after = loop_rate(loop, baseline_seconds)
    loop.stop_event.set()
    loop.join()
    if loop.error is not None:
        raise loop.error

    with raw_connect() as conn:
        left = conn.execute("SELECT count(*) FROM durable_run WHERE run_id LIKE 'old-%'").fetchone()[0]
        orphans = conn.execute(
            "SELECT count(*) FROM durable_step s WHERE NOT EXISTS "
            "(SELECT 1 FROM durable_run r WHERE r.run_id = s.run_id)"
        ).fetchone()[0]
    assert deleted == runs and left == 0 and orphans == 0, (deleted, left, orphans)
    record(
        "purge",
        f"{deleted} runs + {deleted * steps} steps in {elapsed:.1f}s, {batches} batches "
        f"(slowest {slowest * 1000:.0f} ms)",
        f"{deleted / elapsed:.0f} runs/s, {deleted * (1 + steps) / elapsed:.0f} rows/s",
    )
    # The machine may be shared: compare with the mean of the windows before and after the purge.
    without = (baseline + after) / 2
    record(
        "enqueue+claim+complete during purge",
        f"{during:.0f}/s vs {baseline:.0f}/s before, {after:.0f}/s after",
        f"{during / without:.2f}",
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=1_000_000)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--baseline-seconds", type=float, default=10.0)
    arguments = parser.parse_args()
    setup_django()
    try:
        main(arguments.runs, arguments.steps, arguments.batch_size, arguments.baseline_seconds)
    finally:
        print_table()
