"""Shared plumbing of the benchmarks: Django set-up, raw connections, worker processes, timing.

The raw-SQL loops here are the ceilings the store is compared with, so they
live with the benchmarks rather than in the store.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS: list[tuple[str, str, str, str]] = []  # (benchmark, measured, ratio, target)
PEERS_MEASURED: set[str] = set()  # the peers (bench_e2e.PEER_DISTRIBUTIONS' keys) that drained at least once


def setup_django() -> None:
    """Configure Django with bench.settings (starting an embedded server if DATABASE_URL is unset) and migrate."""
    if ROOT not in sys.path:
        sys.path.insert(0, ROOT)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)


def raw_connect():
    """A psycopg connection in autocommit to the benchmark server."""
    import psycopg

    return psycopg.connect(os.environ["DATABASE_URL"], autocommit=True)


def reset_tables() -> None:
    """Empty the durable tables and the raw copies so each benchmark starts from nothing."""
    with raw_connect() as conn:
        conn.execute("TRUNCATE durable_run, durable_step, durable_signal, durable_attempt")
        conn.execute("DROP TABLE IF EXISTS bench_raw_run, bench_raw_step")
        # Same columns, defaults and indexes as the store's tables: a fair ceiling.
        conn.execute("CREATE TABLE bench_raw_run (LIKE durable_run INCLUDING ALL)")
        conn.execute("CREATE TABLE bench_raw_step (LIKE durable_step INCLUDING ALL)")
        conn.execute("VACUUM ANALYZE durable_run")


def status_counts(table: str = "durable_run") -> dict[str, int]:
    with raw_connect() as conn:
        return dict(conn.execute(f"SELECT status, count(*) FROM {table} GROUP BY status").fetchall())


def worker_command(concurrency: int, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "django",
        "durable_worker",
        "--concurrency",
        str(concurrency),
        "--no-scheduler",
        "-v",
        "0",
        *extra,
    ]


def spawn(command: list[str], env: dict | None = None) -> subprocess.Popen:
    full_env = {**os.environ, "PYTHONPATH": ROOT, "DJANGO_SETTINGS_MODULE": "bench.settings", **(env or {})}
    # stderr goes to a file, not a pipe: a chatty worker must never block on a full pipe nobody reads.
    errors = tempfile.TemporaryFile()  # noqa: SIM115 - it lives as long as the process it collects for
    process = subprocess.Popen(command, cwd=ROOT, env=full_env, stdout=subprocess.DEVNULL, stderr=errors)
    process.error_file = errors
    return process


def error_output(process: subprocess.Popen) -> str:
    process.error_file.seek(0)
    return process.error_file.read().decode(errors="replace")


def stop(processes: list[subprocess.Popen], timeout: float = 30) -> None:
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    for process in processes:
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def rate_while_draining(
    done_count, total: int, processes: list[subprocess.Popen] | None = None, timeout: float = 600, on_sample=None
) -> float:
    """Items/s between the first finished item and the last, polling ``done_count()``.

    Starting the clock at the first finished item leaves process start-up out, the
    same way for every system measured.
    """
    deadline = time.monotonic() + timeout
    first = None
    while time.monotonic() < deadline:
        done = done_count()
        now = time.monotonic()
        if on_sample:
            on_sample()
        if first is None and done > 0:
            first = (now, done)
        if done >= total:
            elapsed = now - first[0]
            return (done - first[1]) / elapsed if elapsed > 0 else float("inf")
        if processes and all(p.poll() is not None for p in processes):
            errors = "".join(error_output(p) for p in processes)
            raise RuntimeError(f"workers exited with {done}/{total} done: {errors[-2000:]}")
        time.sleep(0.02)
    raise RuntimeError(f"timed out with {done_count()}/{total} done")


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def record(benchmark: str, measured: str, ratio: str = "", target: str = "") -> None:
    RESULTS.append((benchmark, measured, ratio, target))
    print(f"  {benchmark}: {measured}  {ratio}  {target}", flush=True)


def print_table() -> None:
    if not RESULTS:
        return
    headers = ("benchmark", "measured", "ratio", "target")
    widths = [max(len(h), *(len(r[i]) for r in RESULTS)) for i, h in enumerate(headers)]
    line = " | ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))
    print("\n" + line + "\n" + "-+-".join("-" * w for w in widths))
    for row in RESULTS:
        print(" | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)))
