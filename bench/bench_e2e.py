"""Issue 3: no-op runs end to end with real worker processes, steps, wake-up latency and RSS."""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import time
import uuid

from . import common
from .bench_store import RAW_INSERT
from .common import raw_connect, record, reset_tables

STEP_ROUNDS = 3
BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
PEERS_VENV = os.path.join(BENCH_DIR, ".peers-venv")


def enqueue_noops(n: int, name: str = "bench.noop", input=None) -> None:
    from durable_django import api

    for _ in range(n):
        api.enqueue(name, input)


def succeeded() -> int:
    with raw_connect() as conn:
        return conn.execute("SELECT count(*) FROM durable_run WHERE status = 'succeeded'").fetchone()[0]


def durable_drain(n: int, processes: int, concurrency: int) -> tuple[float, float]:
    """Drain n no-op runs with burst workers; returns (runs/s, peak RSS MB of the first worker)."""
    reset_tables()
    enqueue_noops(n)
    workers = [common.spawn(common.worker_command(concurrency, "--burst")) for _ in range(processes)]
    peak = [0.0]

    def sample():
        with contextlib.suppress(OSError):
            peak[0] = max(peak[0], common.rss_mb(workers[0].pid))

    try:
        rate = common.rate_while_draining(succeeded, n, workers, on_sample=sample)
    finally:
        common.stop(workers)
    return rate, peak[0]


def _raw_process(barrier, index: int, out) -> None:
    barrier.wait()
    raw_claim_complete_any(f"raw-{index}", out)


def raw_claim_complete_any(worker_id: str, out) -> None:
    """bench_store's raw loop, without the count check (several processes share the rows)."""
    from .bench_store import raw_drain_loop

    with raw_connect() as conn:
        raw_drain_loop(conn, worker_id)
    out.put(time.perf_counter())


def raw_drain(n: int, processes: int = 4) -> float:
    """The ceiling: n rows claimed 10 at a time with SKIP LOCKED and completed one by one, in processes."""
    reset_tables()
    with raw_connect() as conn:
        for _ in range(n):
            conn.execute(RAW_INSERT, [str(uuid.uuid4())])
    ctx = multiprocessing.get_context("fork")
    barrier, out = ctx.Barrier(processes + 1), ctx.Queue()
    procs = [ctx.Process(target=_raw_process, args=(barrier, i, out)) for i in range(processes)]
    for proc in procs:
        proc.start()
    barrier.wait()
    started = time.perf_counter()
    ends = [out.get(timeout=600) for _ in procs]
    for proc in procs:
        proc.join()
    with raw_connect() as conn:
        done = conn.execute("SELECT count(*) FROM bench_raw_run WHERE status = 'succeeded'").fetchone()[0]
    assert done == n, f"raw loop completed {done} of {n}"
    return n / (max(ends) - started)


def durable_steps(runs: int, steps: int = 100) -> float:
    reset_tables()
    enqueue_noops(runs, "bench.steps", {"steps": steps})
    worker = common.spawn(common.worker_command(1, "--burst"))
    try:
        common.rate_while_draining(succeeded, runs, [worker])
    finally:
        common.stop([worker])
    with raw_connect() as conn:
        span, journaled = conn.execute(
            "SELECT extract(epoch FROM max(finished_at) - min(started_at)), "
            "(SELECT count(*) FROM durable_step) FROM durable_run"
        ).fetchone()
    assert journaled == runs * steps, f"{journaled} steps journaled, expected {runs * steps}"
    return runs * steps / float(span)


def raw_steps(total: int) -> float:
    reset_tables()
    with raw_connect() as conn:
        run_id = str(uuid.uuid4())
        started = time.perf_counter()
        for index in range(total):
            conn.execute(
                "INSERT INTO bench_raw_step (run_id, step_id, result) VALUES (%s, %s, 'null'::jsonb)",
                [run_id, f"v1:noop:{index}"],
            )
        return total / (time.perf_counter() - started)


def wake_latency(tries: int) -> tuple[float, float]:
    """Enqueue-to-handler-start latency of an idle worker, in ms: (p50, p95)."""
    from durable_django import api

    reset_tables()
    worker = common.spawn(common.worker_command(4))
    try:
        api.wait_for_result(api.enqueue("bench.stamp").run_id, timeout=60)  # warm: the worker is up
        latencies = []
        for _ in range(tries):
            time.sleep(0.3)  # let the worker go idle on its wait
            before = time.time()
            run = api.enqueue("bench.stamp")
            landed = api.wait_for_result(run.run_id, timeout=30)
            latencies.append((landed.output - before) * 1000)
    finally:
        common.stop([worker])
    latencies.sort()
    return statistics.median(latencies), latencies[round(0.95 * (len(latencies) - 1))]


# -- peers ------------------------------------------------------------------------------------


def peers_python() -> str:
    """The peers' own venv (bench/.peers-venv), created from requirements-peers.txt on first use."""
    python = os.path.join(PEERS_VENV, "bin", "python")
    if not os.path.exists(python):
        print("  creating the peers' venv (bench/.peers-venv)", flush=True)
        subprocess.run([sys.executable, "-m", "venv", PEERS_VENV], check=True)
        subprocess.run(
            [python, "-m", "pip", "install", "-q", "-r", os.path.join(BENCH_DIR, "requirements-peers.txt")], check=True
        )
    return python


def peer_database_url() -> str:
    """A fresh database on the same server for the peers' tables."""
    import psycopg

    with raw_connect() as conn:
        conn.execute("DROP DATABASE IF EXISTS bench_peers")
        conn.execute("CREATE DATABASE bench_peers")
        dbname = conn.info.dbname
    url = os.environ["DATABASE_URL"]
    info = psycopg.conninfo.conninfo_to_dict(url)
    info["dbname"] = "bench_peers"
    del dbname
    return psycopg.conninfo.make_conninfo(**info)


def run_peer(peer: str, n: int) -> dict:
    try:
        python = peers_python()
    except (subprocess.CalledProcessError, OSError) as exc:
        return {"error": f"could not create the peers' venv: {exc}"}
    env = {**os.environ, "PEER_DATABASE_URL": peer_database_url(), "PYTHONPATH": common.ROOT}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    result = subprocess.run(
        [python, "-m", "bench.peers", peer, str(n)],
        cwd=common.ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    if result.returncode or not lines:
        return {"error": f"exit {result.returncode}: {(result.stderr or result.stdout)[-800:]}"}
    return json.loads(lines[-1])


def main(args, *, with_durable: bool = True, with_peers: bool = True) -> None:
    n = args.runs
    print(f"issue 3: {n} no-op runs end to end", flush=True)
    best = (0.0, "")
    if with_durable:
        rss = None
        for layout in args.layouts.split(","):
            processes, concurrency = map(int, layout.split("x"))
            rate, peak = durable_drain(n, processes, concurrency)
            record(f"durable_worker {processes} proc x {concurrency} threads", f"{rate:.0f} runs/s")
            if (processes, concurrency) == (1, 8):
                rss = peak
            best = max(best, (rate, layout))
        if rss is None:
            _, rss = durable_drain(n, 1, 8)
        raw = raw_drain(n, 4)
        record("raw claim+complete, 4 processes", f"{raw:.0f} runs/s")
        record(
            f"durable best ({best[1]}) / raw 4 proc",
            f"{best[0]:.0f} vs {raw:.0f} runs/s",
            f"{best[0] / raw:.2f}",
            ">= 0.50",
        )
    if with_peers:
        peers = {}
        for peer in ("django-tasks-db", "procrastinate"):
            outcome = run_peer(peer, n)
            if "error" in outcome:
                record(f"{peer} worker", "could not run", "", "")
                print(f"  {peer}: {outcome['error']}", flush=True)
                continue
            peers[peer] = outcome["rate"]
            record(
                f"{peer} worker ({outcome['layout']})",
                f"{outcome['rate']:.0f} runs/s",
                f"durable/peer {best[0] / outcome['rate']:.2f}" if best[0] else "",
            )
        if peers and best[0]:
            fastest = max(peers, key=peers.get)
            record(
                f"durable best / fastest peer ({fastest})",
                f"{best[0]:.0f} vs {peers[fastest]:.0f} runs/s",
                f"{best[0] / peers[fastest]:.2f}",
                ">= 2.00",
            )
    if with_durable:
        # Rounds of each side in turn; the median round is reported (the machine is shared).
        rounds = sorted(
            ((durable_steps(args.step_runs), raw_steps(args.step_runs * 100)) for _ in range(STEP_ROUNDS)),
            key=lambda pair: pair[0] / pair[1],
        )
        durable, raw = rounds[len(rounds) // 2]
        record(
            f"steps (1 slot) vs raw INSERT loop, median of {STEP_ROUNDS} rounds",
            f"{durable:.0f} vs {raw:.0f} steps/s",
            f"{durable / raw:.2f}",
            ">= 0.80",
        )
        p50, p95 = wake_latency(args.latency_tries)
        record(
            f"wake-up latency ({args.latency_tries} tries)", f"p50 {p50:.1f} ms, p95 {p95:.1f} ms", "", "p50 < 10 ms"
        )
        record("worker RSS, concurrency 8 under load", f"{rss:.0f} MB", "", "< 150 MB")
