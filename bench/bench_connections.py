"""The PostgreSQL connections a ``durable_worker`` process holds under load.

A worker at ``--concurrency`` 1, 8 and 32 (with its scheduler and reconciler, as
deployed) drains runs that keep every slot busy journalling steps; the
connections it holds are sampled from ``pg_stat_activity`` every 20 ms and the
peak is reported, split into the LISTEN session, the engine's connections
(named ``durable_worker ...`` in ``application_name``) and any other (a
handler's own, or those of a worker that does not name its connections). Every
connection on the benchmark database that was not there before the worker
started, other than the sampler's, is the worker's.
"""

from __future__ import annotations

import time

from . import common
from .common import raw_connect, record, reset_tables

CONCURRENCIES = (1, 8, 32)
# Each run journals STEPS steps of PAUSE seconds: about 6 s of a busy slot, so that in two waves
# of runs the heartbeat renews (every LEASE_SECONDS / 3) and the reconciler makes its first pass.
STEPS, PAUSE = 40, 0.15

COUNT = """
SELECT CASE WHEN query LIKE 'LISTEN%%' THEN 'listen'
            WHEN application_name LIKE 'durable_worker%%' THEN 'engine' ELSE 'other' END, count(*)
FROM pg_stat_activity
WHERE datname = current_database() AND backend_type = 'client backend'
  AND pid <> pg_backend_pid() AND pid <> ALL(%s)
GROUP BY 1
"""
BUSY = "SELECT count(*) FROM durable_run WHERE status = 'running' AND attempt_started_at IS NOT NULL"
DONE = "SELECT count(*) FROM durable_run WHERE status = 'succeeded'"


def worker_command(concurrency: int) -> list[str]:
    """A worker as deployed: scheduler and reconciler on (``common.worker_command`` turns the scheduler off)."""
    command = common.worker_command(concurrency)
    command.remove("--no-scheduler")
    return command


def peak_connections(concurrency: int, runs: int) -> tuple[int, dict[str, int], int]:
    """Drain ``runs`` busy runs with one worker; returns (peak connections, their split then, most runs running)."""
    from django.db import connections

    from durable_django import api

    reset_tables()
    for _ in range(runs):
        api.enqueue("bench.busy", {"steps": STEPS, "pause": PAUSE})
    connections.close_all()
    with raw_connect() as sampler:
        before = [
            pid
            for (pid,) in sampler.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
            ).fetchall()
        ]
        worker = common.spawn(worker_command(concurrency))
        peak, split, busy = 0, {}, 0
        try:
            deadline = time.monotonic() + 600
            while sampler.execute(DONE).fetchone()[0] < runs:
                if worker.poll() is not None:
                    raise RuntimeError(f"the worker exited: {common.error_output(worker)[-2000:]}")
                if time.monotonic() > deadline:
                    raise RuntimeError("timed out")
                counts = dict(sampler.execute(COUNT, [before]).fetchall())
                if sum(counts.values()) > peak:
                    peak, split = sum(counts.values()), counts
                busy = max(busy, sampler.execute(BUSY).fetchone()[0])
                time.sleep(0.02)
        finally:
            common.stop([worker])
    return peak, split, busy


def main() -> None:
    print(f"connections per worker under load (steps of {PAUSE}s)", flush=True)
    for concurrency in CONCURRENCIES:
        peak, split, busy = peak_connections(concurrency, runs=max(2 * concurrency, 4))
        detail = ", ".join(f"{name} {count}" for name, count in sorted(split.items()))
        record(
            f"connections of a worker at --concurrency {concurrency} ({busy} runs running at once)",
            f"{peak} ({detail})",
            "",
            "bounded whatever the concurrency",
        )
