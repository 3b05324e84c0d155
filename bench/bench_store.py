"""Issue 2: enqueue and claim+complete through the store against the same operations as raw SQL."""

from __future__ import annotations

import time
import uuid

from .common import raw_connect, record, reset_tables

RAW_INSERT = """
INSERT INTO bench_raw_run (run_id, name, version, status, input, retry_policy, queue, priority)
VALUES (%s, 'bench.noop', 1, 'pending', 'null'::jsonb, '{}'::jsonb, 'default', 0)
"""
RAW_CLAIM = """
UPDATE bench_raw_run SET status = 'running', attempts = attempts + 1, worker_id = %s,
    leased_until = now() + interval '30 seconds', claimed_at = now(), started_at = now(), updated_at = now()
WHERE run_id IN (
    SELECT run_id FROM bench_raw_run WHERE status = 'pending' AND (available_at IS NULL OR available_at <= now())
    ORDER BY priority DESC, created_at LIMIT 10 FOR UPDATE SKIP LOCKED)
RETURNING run_id, attempts
"""
RAW_COMPLETE = """
UPDATE bench_raw_run SET status = 'succeeded', output = 'null'::jsonb, leased_until = NULL,
    finished_at = now(), updated_at = now()
WHERE run_id = %s AND attempts = %s AND status = 'running'
"""


def store_enqueue(n: int) -> float:
    from durable_django import api

    started = time.perf_counter()
    for _ in range(n):
        api.enqueue("bench.noop")
    return n / (time.perf_counter() - started)


def store_claim_complete(n: int) -> float:
    from durable_django.store import claims, landing
    from durable_django.worker.loop import WorkerOptions

    bounds = WorkerOptions(functions=["bench.noop"]).claim_bounds()
    done = 0
    started = time.perf_counter()
    while True:
        claimed = claims.claim(limit=10, start_now=10, lease_seconds=30, worker_id="bench", bounds=bounds)
        if not claimed:
            break
        for item in claimed:
            run = item.run
            landing.complete_many([landing.Finished(run.run_id, run.attempts, "null", None)])
            done += 1
    elapsed = time.perf_counter() - started
    assert done == n, f"store completed {done} of {n}"
    return n / elapsed


def raw_enqueue(n: int) -> float:
    with raw_connect() as conn:
        started = time.perf_counter()
        for _ in range(n):
            conn.execute(RAW_INSERT, [str(uuid.uuid4())])
        return n / (time.perf_counter() - started)


def raw_drain_loop(conn, worker_id: str) -> int:
    """Claim 10 at a time and complete one by one until nothing is left; returns how many."""
    done = 0
    while True:
        claimed = conn.execute(RAW_CLAIM, [worker_id]).fetchall()
        if not claimed:
            return done
        for run_id, attempts in claimed:
            conn.execute(RAW_COMPLETE, [run_id, attempts])
            done += 1


def raw_claim_complete(n: int, worker_id: str = "bench") -> float:
    with raw_connect() as conn:
        started = time.perf_counter()
        done = raw_drain_loop(conn, worker_id)
        elapsed = time.perf_counter() - started
    assert done == n, f"raw completed {done} of {n}"
    return n / elapsed


def main(n: int) -> None:
    print(f"issue 2: store vs raw SQL, {n} runs, one connection", flush=True)
    reset_tables()
    # Alternate store and raw so drift from the other users of the machine hits both.
    store_in, raw_in = store_enqueue(n), raw_enqueue(n)
    store_cc, raw_cc = store_claim_complete(n), raw_claim_complete(n)
    record("enqueue (api.enqueue vs INSERT)", f"{store_in:.0f} vs {raw_in:.0f} runs/s", f"{store_in / raw_in:.2f}")
    record(
        "claim(10)+complete (store vs raw)",
        f"{store_cc:.0f} vs {raw_cc:.0f} runs/s",
        f"{store_cc / raw_cc:.2f}",
        ">= 0.70",
    )
