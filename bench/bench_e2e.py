"""No-op runs end to end with real worker processes, steps, wake-up latency and RSS."""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
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


def durable_drain(
    n: int, processes: int, concurrency: int, name: str = "bench.noop", input=None
) -> tuple[float, float]:
    """Drain n runs (no-ops unless named) with burst workers; returns (runs/s, peak RSS MB of the first worker)."""
    reset_tables()
    enqueue_noops(n, name, input)
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


def _raw_process(barrier, index: int, out, batched: bool) -> None:
    barrier.wait()
    raw_claim_complete_any(f"raw-{index}", out, batched)


def raw_claim_complete_any(worker_id: str, out, batched: bool) -> None:
    """bench_store's raw loop, without the count check (several processes share the rows)."""
    from .bench_store import raw_drain_loop

    with raw_connect() as conn:
        raw_drain_loop(conn, worker_id, batched=batched)
    out.put(time.perf_counter())


def raw_drain(n: int, processes: int = 4, *, batched: bool = False) -> float:
    """The ceiling: n rows claimed 10 at a time with SKIP LOCKED and completed one by one (``batched``: ten
    in one statement), in processes."""
    reset_tables()
    with raw_connect() as conn:
        for _ in range(n):
            conn.execute(RAW_INSERT, [str(uuid.uuid4())])
    ctx = multiprocessing.get_context("fork")
    barrier, out = ctx.Barrier(processes + 1), ctx.Queue()
    procs = [ctx.Process(target=_raw_process, args=(barrier, i, out, batched)) for i in range(processes)]
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


# The batched ceiling again, in pgbench (a C client, no Python): each transaction claims ten runs and
# completes them with one fenced statement, two commits per ten runs as in the psycopg loop. The claim's
# ids and tokens come back as one row of arrays (\gset), passed to the completion as parameters (-M prepared).
PGBENCH_SCRIPT = """
WITH claimed AS (
    UPDATE bench_raw_run SET status = 'running', attempts = attempts + 1, worker_id = 'pgbench',
        leased_until = now() + interval '30 seconds', claimed_at = now(), started_at = now(), updated_at = now()
    WHERE run_id IN (
        SELECT run_id FROM bench_raw_run
        WHERE status = 'pending' AND held_by IS NULL AND (available_at IS NULL OR available_at <= now())
        ORDER BY priority DESC, created_at LIMIT 10 FOR UPDATE SKIP LOCKED)
    RETURNING run_id, attempts)
SELECT coalesce(array_agg(run_id), '{}')::text AS ids, coalesce(array_agg(attempts), '{}')::text AS tokens
FROM claimed \\gset
UPDATE bench_raw_run r SET status = 'succeeded', output = 'null'::jsonb, leased_until = NULL,
    finished_at = now(), updated_at = now()
FROM unnest(:ids::text[], :tokens::int[]) AS done(run_id, attempts)
WHERE r.run_id = done.run_id AND r.attempts = done.attempts AND r.status = 'running';
"""


def pgbench_path() -> str:
    """pgbench of the embedded server's own build (the same major version as the server)."""
    import pgserver

    return os.path.join(os.path.dirname(pgserver.__file__), "pginstall", "bin", "pgbench")


def pgbench_drain(n: int, clients: int = 4) -> float:
    """The batched ceiling in pgbench: n rows drained by ``clients`` connections; runs/s."""
    reset_tables()
    with raw_connect() as conn:
        for _ in range(n):
            conn.execute(RAW_INSERT, [str(uuid.uuid4())])
    # Enough transactions for every client to find the queue empty at the end (an empty claim is cheap).
    transactions = n // (10 * clients) + 20
    with tempfile.NamedTemporaryFile("w", suffix=".sql") as script:
        script.write(PGBENCH_SCRIPT)
        script.flush()
        started = time.perf_counter()
        subprocess.run(
            [pgbench_path(), "-n", "-M", "prepared", "-c", str(clients), "-j", str(clients), "-t", str(transactions),
             "-f", script.name, os.environ["DATABASE_URL"]],
            check=True, capture_output=True,
        )
        elapsed = time.perf_counter() - started
    with raw_connect() as conn:
        done = conn.execute("SELECT count(*) FROM bench_raw_run WHERE status = 'succeeded'").fetchone()[0]
    assert done == n, f"pgbench completed {done} of {n}"
    return n / elapsed


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

# Each peer's candidate layouts; every one is drained in every round and the best median is compared.
PEER_LAYOUTS = {
    "django-tasks-db": ("1", "2", "4"),  # db_worker processes
    "procrastinate": ("2x16", "4x2", "4x8"),  # worker processes x concurrency
}
DBOS_LAYOUTS = ("1", "2")  # worker processes, 1,000 workflows each
PEER_CONFIG = {
    "django-tasks-db": "`db_worker`, `CONN_MAX_AGE=None`",
    "procrastinate": "pool of concurrency + 1, LISTEN/NOTIFY",
    "dbos": "queue, worker_concurrency 1000, executor_id per process",
}
# Each peer's distributions as pip names them: the report's header reads their versions in the peers' venv.
PEER_DISTRIBUTIONS = {
    "django-tasks-db": ("django-tasks-db", "django-tasks"),
    "procrastinate": ("procrastinate",),
    "dbos": ("dbos",),
}
REQUIREMENTS = os.path.join(BENCH_DIR, "requirements-peers.txt")
PEERS_PYTHON = os.path.join(PEERS_VENV, "bin", "python")


def peers_python() -> str:
    """The peers' own venv (bench/.peers-venv), brought up to date with requirements-peers.txt."""
    python = PEERS_PYTHON
    stamp = os.path.join(PEERS_VENV, "requirements-peers.txt")
    with open(REQUIREMENTS) as wanted:
        requirements = wanted.read()
    if os.path.exists(stamp):
        with open(stamp) as installed:
            if installed.read() == requirements:
                return python
    print("  installing the peers' venv (bench/.peers-venv)", flush=True)
    if not os.path.exists(python):
        subprocess.run([sys.executable, "-m", "venv", PEERS_VENV], check=True)
    subprocess.run([python, "-m", "pip", "install", "-q", "-r", REQUIREMENTS], check=True)
    with open(stamp, "w") as installed:
        installed.write(requirements)
    return python


def peer_database_url(peer: str) -> str:
    """A fresh database of the peer's own on the same server, as a URL (DBOS reads nothing else)."""
    from urllib.parse import urlsplit

    dbname = "bench_peer_" + peer.replace("-", "_")
    with raw_connect() as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {dbname}")
        conn.execute(f"CREATE DATABASE {dbname}")
    return urlsplit(os.environ["DATABASE_URL"])._replace(path=f"/{dbname}").geturl()


def run_peer(peer: str, layout: str, n: int, url: str) -> dict:
    """One drain of n jobs by the peer's workers in one layout, in the peers' venv: {rate} or {error}."""
    try:
        python = peers_python()
    except (subprocess.CalledProcessError, OSError) as exc:
        return {"error": f"could not install the peers' venv: {exc}"}
    env = {**os.environ, "PEER_DATABASE_URL": url, "PYTHONPATH": common.ROOT}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    result = subprocess.run(
        [python, "-m", "bench.peers", peer, layout, str(n)],
        cwd=common.ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    if result.returncode or not lines:
        return {"error": f"exit {result.returncode}: {(result.stderr or result.stdout)[-800:]}"}
    return json.loads(lines[-1])


def durable_steps3(n: int, processes: int, concurrency: int) -> float:
    """n runs of a function of three journalled no-op steps, drained by burst workers: runs/s."""
    rate, _ = durable_drain(n, processes, concurrency, "bench.steps", {"steps": 3})
    with raw_connect() as conn:
        journaled = conn.execute("SELECT count(*) FROM durable_step").fetchone()[0]
    assert journaled == 3 * n, f"{journaled} steps journaled, expected {3 * n}"
    return rate


def best(samples: dict[str, list[float]]) -> tuple[float, str]:
    """The best layout by its median rate: (median, layout)."""
    return max((statistics.median(rates), layout) for layout, rates in samples.items())


def medians(samples: dict[str, list[float]]) -> str:
    return ", ".join(f"{layout}: {statistics.median(rates):.0f}" for layout, rates in samples.items())


def peers_main(args) -> None:
    """Rounds that alternate durable_worker and the peers, each in every candidate layout; medians compared."""
    n, rounds = args.runs, args.peer_rounds
    print(f"peers: {n} runs per drain, {rounds} rounds alternating the sides", flush=True)
    layouts = [tuple(map(int, layout.split("x"))) for layout in args.layouts.split(",")]
    urls = {peer: peer_database_url(peer) for peer in (*PEER_LAYOUTS, "dbos")}
    samples: dict[str, dict[str, list[float]]] = {}
    failed: dict[str, str] = {}
    plan = [("durable", f"{p}x{c}", lambda p=p, c=c: durable_drain(n, p, c)[0]) for p, c in layouts]
    plan += [(peer, layout, None) for peer, options in PEER_LAYOUTS.items() for layout in options]
    plan += [("durable 3 steps", f"{p}x{c}", lambda p=p, c=c: durable_steps3(n, p, c)) for p, c in layouts]
    plan += [("dbos", layout, None) for layout in DBOS_LAYOUTS]
    for index in range(rounds):
        for system, layout, measure in plan if index % 2 == 0 else reversed(plan):
            if system in failed:
                continue
            if measure is None:
                outcome = run_peer(system, layout, n, urls[system])
                if "error" in outcome:
                    failed[system] = outcome["error"]
                    print(f"  {system} {layout}: {outcome['error']}", flush=True)
                    continue
                rate = outcome["rate"]
                common.PEERS_MEASURED.add(system)
            else:
                rate = measure()
            samples.setdefault(system, {}).setdefault(layout, []).append(rate)
            print(f"  round {index + 1}: {system} {layout}: {rate:.0f}/s", flush=True)
    durable, durable_layout = best(samples["durable"])
    record(
        f"durable_worker, best layout {durable_layout} (median of {rounds})",
        f"{durable:.0f} runs/s ({medians(samples['durable'])})",
    )
    rates = {}
    for peer in PEER_LAYOUTS:
        if peer in failed:
            record(f"{peer} worker", "could not run", "", "")
            continue
        rates[peer], layout = best(samples[peer])
        record(
            f"{peer} ({PEER_CONFIG[peer]}), best layout {layout}",
            f"{rates[peer]:.0f} runs/s ({medians(samples[peer])})",
            f"durable/peer {durable / rates[peer]:.2f}",
        )
    if rates:
        fastest = max(rates, key=rates.get)
        record(
            f"durable best / fastest peer ({fastest})",
            f"{durable:.0f} vs {rates[fastest]:.0f} runs/s",
            f"{durable / rates[fastest]:.2f}",
            ">= 2.00",
        )
    steps3, steps3_layout = best(samples["durable 3 steps"])
    record(
        f"durable_worker, 3 steps, best layout {steps3_layout} (median of {rounds})",
        f"{steps3:.0f} runs/s ({medians(samples['durable 3 steps'])})",
    )
    if "dbos" in failed:
        record("DBOS workflow of 3 steps", "could not run", "", "")
        return
    dbos, dbos_layout = best(samples["dbos"])
    record(
        f"durable 3 steps / DBOS 3 steps ({PEER_CONFIG['dbos']}, best {dbos_layout} proc)",
        f"{steps3:.0f} vs {dbos:.0f} workflows/s (DBOS {medians(samples['dbos'])})",
        f"{steps3 / dbos:.2f}",
    )


def main(args) -> None:
    n = args.runs
    print(f"{n} no-op runs end to end", flush=True)
    fastest = (0.0, "")
    rss = None
    for layout in args.layouts.split(","):
        processes, concurrency = map(int, layout.split("x"))
        rate, peak = durable_drain(n, processes, concurrency)
        record(f"durable_worker {processes} proc x {concurrency} threads", f"{rate:.0f} runs/s")
        if (processes, concurrency) == (1, 8):
            rss = peak
        fastest = max(fastest, (rate, layout))
    if rss is None:
        _, rss = durable_drain(n, 1, 8)
    raw = raw_drain(n, 4)
    record("raw claim+complete, 4 processes", f"{raw:.0f} runs/s")
    record(
        f"durable best ({fastest[1]}) / raw 4 proc",
        f"{fastest[0]:.0f} vs {raw:.0f} runs/s",
        f"{fastest[0] / raw:.2f}",
        ">= 0.50",
    )
    batched = raw_drain(n, 4, batched=True)
    record("raw claim 10 + one fenced complete of 10, 4 processes", f"{batched:.0f} runs/s")
    record(
        f"durable best ({fastest[1]}) / raw batched 4 proc",
        f"{fastest[0]:.0f} vs {batched:.0f} runs/s",
        f"{fastest[0] / batched:.2f}",
        "",
    )
    in_c = pgbench_drain(n, 4)
    record("the same batched loop in pgbench (a C client), 4 clients", f"{in_c:.0f} runs/s")
    record(
        f"durable best ({fastest[1]}) / batched loop in pgbench",
        f"{fastest[0]:.0f} vs {in_c:.0f} runs/s",
        f"{fastest[0] / in_c:.2f}",
        ">= 0.50",
    )
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
    record(f"wake-up latency ({args.latency_tries} tries)", f"p50 {p50:.1f} ms, p95 {p95:.1f} ms", "", "p50 < 10 ms")
    record("worker RSS, concurrency 8 under load", f"{rss:.0f} MB", "", "< 150 MB")
