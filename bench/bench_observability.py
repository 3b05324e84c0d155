"""A worker with OpenTelemetry (the SDK, a batch processor) and Prometheus (--metrics-port) enabled
vs the same worker without, on no-op runs.

Rounds alternate plain and instrumented, each draining the same number of no-op runs with a fresh
``durable_worker --burst``. Two figures are compared, each the median over the rounds: runs per second
(from the first landed run to the last), and runs per CPU-second of the worker process over the same
window, which a machine shared with other work disturbs far less. The instrumented worker is checked to
have traced every attempt (its exporter counts the spans) and to have served its metrics while it ran.
"""

from __future__ import annotations

import os
import shutil
import socket
import statistics
import tempfile
import time
import urllib.request

from . import common
from .bench_e2e import enqueue_noops, succeeded
from .common import record, reset_tables

TICKS = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (all its threads), from /proc."""
    with open(f"/proc/{pid}/stat") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def scraped_attempts(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=1) as response:
            return b"durable_attempts_total{" in response.read()
    except OSError:
        return False


def drain(n: int, concurrency: int, *, instrumented: bool) -> tuple[float, float]:
    """(runs/s, runs per worker CPU-second) of one burst worker draining n no-op runs."""
    reset_tables()
    enqueue_noops(n)
    extra: list[str] = []
    env: dict[str, str] = {}
    port, spans_file, served = 0, "", False
    if instrumented:
        port = free_port()
        spans_file = os.path.join(tempfile.mkdtemp(prefix="bench-spans-"), "count")  # written at the worker's exit
        extra = ["--metrics-port", str(port)]
        env = {"BENCH_OTEL_SPANS_FILE": spans_file}
    worker = common.spawn(common.worker_command(concurrency, "--burst", *extra), env=env)
    first: tuple[float, float, int] | None = None
    try:
        deadline = time.monotonic() + 600
        while True:
            done, now, cpu = succeeded(), time.monotonic(), cpu_seconds(worker.pid)
            if first is None and done > 0:
                first = (now, cpu, done)
            if done >= n and first is not None:
                break
            if instrumented and not served:
                served = scraped_attempts(port)
            if worker.poll() is not None or now > deadline:
                raise RuntimeError(f"the worker stopped with {done}/{n} done: {common.error_output(worker)[-2000:]}")
            time.sleep(0.02)
        worker.wait(60)
    finally:
        common.stop([worker])
    landed = n - first[2]
    rate, per_cpu = landed / (now - first[0]), landed / max(cpu - first[1], 1e-9)
    if instrumented:
        with open(spans_file) as handle:
            traced = int(handle.read())
        shutil.rmtree(os.path.dirname(spans_file))
        assert traced == n, f"the instrumented worker traced {traced} attempts of {n}"
        assert served, "the instrumented worker's metrics port never served an attempt count"
    return rate, per_cpu


def main(n: int, concurrency: int = 8, rounds: int = 5) -> None:
    print(f"{n} no-op runs, 1 worker x {concurrency} threads, with and without OpenTelemetry + Prometheus")
    plain, instrumented = [], []
    drain(n, concurrency, instrumented=False)  # warm-up: caches, statistics
    for _ in range(rounds):
        plain.append(drain(n, concurrency, instrumented=False))
        instrumented.append(drain(n, concurrency, instrumented=True))
        print(
            f"  round: {instrumented[-1][0]:.0f} vs {plain[-1][0]:.0f} runs/s, "
            f"{instrumented[-1][1]:.0f} vs {plain[-1][1]:.0f} runs per worker CPU-second",
            flush=True,
        )
    on_rate, off_rate = (statistics.median(rate for rate, _ in side) for side in (instrumented, plain))
    on_cpu, off_cpu = (statistics.median(per_cpu for _, per_cpu in side) for side in (instrumented, plain))
    record(
        "no-op runs, OpenTelemetry SDK + Prometheus on / off",
        f"{on_rate:.0f} vs {off_rate:.0f} runs/s (median of {rounds})",
        f"{on_rate / off_rate:.2f}",
        ">= 0.90",
    )
    record(
        "same, runs per worker CPU-second",
        f"{on_cpu:.0f} vs {off_cpu:.0f}",
        f"{on_cpu / off_cpu:.2f}",
        ">= 0.90",
    )
