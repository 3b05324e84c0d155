"""durable-django's long-horizon adapter for hardbyte/postgresql-job-queue-benchmarking (its JSONL protocol).

One process, as the protocol's CONTRIBUTING_ADAPTERS.md asks: stdout is telemetry (a descriptor, then one
JSON record per metric every SAMPLE_EVERY_S, aligned to the wall clock), stderr is logs. It installs the
schema the way a user does (``migrate``), produces with ``enqueue_many`` and consumes with real
``manage.py durable_worker`` processes that it supervises as docs/deployment.md says to (restarted whatever
their exit status, 2 s later). The workers die with the adapter (``PR_SET_PDEATHSIG``), as a container's
processes do when the harness kills it.

Run it as ``python -m bench.harness.adapter`` from the repository root, with the harness's environment.
"""

from __future__ import annotations

import ctypes
import datetime
import json
import math
import os
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from urllib.parse import urlparse

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SYSTEM = "durable-django"
FUNCTION = "harness.job"
EVENT_TABLES = [
    "public.durable_run",
    "public.durable_attempt",
    "public.durable_step",
    "public.durable_lease_renewal",
    "public.durable_worker",
]
# Available runs not yet claimed: what the claim index holds.
DEPTH_SQL = "SELECT count(*) FROM durable_run WHERE status = 'pending' AND held_by IS NULL"
RESTART_SECONDS = 2.0  # docs/deployment.md: Restart=always, RestartSec=2
LATENCY_WINDOW_S = 30
OBSERVER_METRICS = {"queue_depth", "producer_target_rate"}


def env_int(key: str, default: int) -> int:
    value = os.environ.get(key)
    return int(value) if value not in (None, "") else default


def instance_id() -> int:
    return env_int("BENCH_INSTANCE_ID", 0)


def now_iso() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def emit(record: dict) -> None:
    record.setdefault("instance_id", instance_id())
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()


def log(message: str) -> None:
    print(f"[{SYSTEM}] {message}", file=sys.stderr, flush=True)


class Histogram:
    """Counts by value rounded to 3 significant figures: bounded memory whatever the number of samples."""

    def __init__(self) -> None:
        self.counts: dict[float, int] = {}
        self.total = 0

    def add(self, value: float) -> None:
        if value > 0:
            digits = 2 - math.floor(math.log10(value))
            value = round(value, digits)
        self.counts[value] = self.counts.get(value, 0) + 1
        self.total += 1


class RollingLatency:
    """The last LATENCY_WINDOW_S seconds as one histogram a second; percentiles over their union."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seconds: dict[int, Histogram] = {}

    def add(self, value: float) -> None:
        second = int(time.monotonic())
        with self.lock:
            histogram = self.seconds.get(second)
            if histogram is None:
                histogram = self.seconds[second] = Histogram()
                for old in [s for s in self.seconds if s <= second - LATENCY_WINDOW_S]:
                    del self.seconds[old]
            histogram.add(value)

    def percentiles(self, *quantiles: float) -> list[float]:
        cutoff = int(time.monotonic()) - LATENCY_WINDOW_S
        merged: dict[float, int] = {}
        with self.lock:
            for second, histogram in self.seconds.items():
                if second > cutoff:
                    for value, count in histogram.counts.items():
                        merged[value] = merged.get(value, 0) + count
        total = sum(merged.values())
        if not total:
            return [0.0 for _ in quantiles]
        ordered = sorted(merged.items())
        results = []
        for quantile in quantiles:
            rank, seen = max(1, math.ceil(quantile * total)), 0
            for value, count in ordered:
                seen += count
                if seen >= rank:
                    results.append(value)
                    break
        return results


class Adapter:
    def __init__(self) -> None:
        self.shutdown = threading.Event()
        self.finished = threading.Event()  # set once the workers are stopped: the supervisor's thread ends then
        self.base_rate = env_int("PRODUCER_RATE", 800)
        self.mode = os.environ.get("PRODUCER_MODE", "fixed")
        self.pacing = os.environ.get("PRODUCER_PACING", "adapter")
        self.target_depth = env_int("TARGET_DEPTH", 1000)
        self.worker_count = env_int("WORKER_COUNT", 32)
        self.batch_max = max(1, env_int("PRODUCER_BATCH_MAX", 128))
        self.batch_ms = max(1, env_int("PRODUCER_BATCH_MS", 10))
        self.sample_every_s = max(1, env_int("SAMPLE_EVERY_S", 5))
        self.padding = "x" * env_int("JOB_PAYLOAD_BYTES", 256)
        self.latency = RollingLatency()
        self.counts_lock = threading.Lock()
        self.enqueued = 0
        self.completed = 0
        self.queue_depth = 0
        self.target_rate = float(self.base_rate)
        self.worker_restarts = 0
        self.socket_dir = tempfile.mkdtemp(prefix="durable-harness-")
        self.socket_path = os.path.join(self.socket_dir, "report")
        self.receiver = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.receiver.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        self.receiver.bind(self.socket_path)
        self.receiver.settimeout(0.5)
        self.workers: list[subprocess.Popen | None] = []
        self.tokens: list[int] = []
        self.producing = threading.Event()
        self.tokens_ready = threading.Condition()

    # ── set-up ──────────────────────────────────────────────────────────

    def worker_layout(self) -> tuple[int, int]:
        """WORKER_COUNT slots as docs/deployment.md lays them on two cores: 1-2 processes of threads."""
        processes = env_int("HARNESS_WORKER_PROCESSES", min(2, max(1, self.worker_count // 8)))
        return processes, math.ceil(self.worker_count / processes)

    def start_worker(self) -> subprocess.Popen:
        from bench.common import worker_command  # importable once main() has put the repository on the path

        _, concurrency = self.worker_layout()
        command = worker_command(concurrency, "--grace", "3")
        env = {
            **os.environ,
            "PYTHONPATH": ROOT,
            "DJANGO_SETTINGS_MODULE": "bench.harness.settings",
            "HARNESS_REPORT_SOCKET": self.socket_path,
        }
        return subprocess.Popen(command, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, preexec_fn=die_with_parent)

    def supervise(self) -> None:
        """Start the workers, and restart any that exits, RESTART_SECONDS after it did.

        This thread forks them, so it lives until they are stopped: PR_SET_PDEATHSIG follows the forking thread.
        """
        processes, _ = self.worker_layout()
        self.workers = [self.start_worker() for _ in range(processes)]
        exited_at: dict[int, float] = {}
        while not self.finished.wait(0.25):
            if self.shutdown.is_set():
                continue
            for index, process in enumerate(self.workers):
                if process is not None and process.poll() is not None:
                    log(f"durable_worker {index} exited (rc={process.returncode}); restarting in {RESTART_SECONDS:g}s")
                    self.workers[index] = None
                    exited_at[index] = time.monotonic()
                if self.workers[index] is None and time.monotonic() - exited_at[index] >= RESTART_SECONDS:
                    self.workers[index] = self.start_worker()
                    self.worker_restarts += 1

    def stop_workers(self) -> None:
        live = [process for process in self.workers if process is not None and process.poll() is None]
        for process in live:
            process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 3.5
        for process in live:
            try:
                process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()

    # ── producer ────────────────────────────────────────────────────────

    def current_rate(self) -> float:
        """The harness's high-load phases raise the rate through this file; it is re-read every tick."""
        path = os.environ.get("PRODUCER_RATE_CONTROL_FILE")
        if path:
            try:
                with open(path) as handle:
                    return float(handle.read().strip())
            except (OSError, ValueError):
                pass
        return float(self.base_rate)

    def read_tokens(self) -> None:
        """PRODUCER_PACING=harness: the harness's pacer writes ``ENQUEUE <n>`` lines on stdin.

        Its tokens start with the process; those written while the schema is migrated are dropped, as an
        adapter pacing itself offers nothing before its producer starts: otherwise they arrive as a burst.
        """
        for line in sys.stdin:
            if not line.startswith("ENQUEUE ") or not self.producing.is_set():
                continue
            try:
                count = int(line.split(" ", 1)[1])
            except ValueError:
                continue
            with self.tokens_ready:
                self.tokens.append(count)
                self.tokens_ready.notify()

    def next_batch(self, state: dict) -> int:
        """How many runs to enqueue now: credit earned on real elapsed time, dispatched up to batch_max."""
        if self.mode == "depth-target":
            self.target_rate = 0.0
            room = self.target_depth - self.queue_depth
            if room <= 0:
                self.shutdown.wait(0.05)
                return 0
            return min(self.batch_max, room)
        rate = self.current_rate()
        self.target_rate = rate
        if self.pacing == "harness":
            # Tokens come at the base rate; a high-load phase's multiplier is applied to them as credit.
            # Every token that came since the last batch counts now: one a batch would fall behind the pacer
            # whenever an insert takes longer than its period.
            with self.tokens_ready:
                if not self.tokens and state["credit"] < 1:
                    self.tokens_ready.wait(0.5)
                count = sum(self.tokens)
                self.tokens.clear()
            state["credit"] += count * rate / max(1.0, float(self.base_rate))
        else:
            elapsed = time.monotonic() - state["tick"]
            if elapsed < self.batch_ms / 1000.0:
                self.shutdown.wait(self.batch_ms / 1000.0 - elapsed)
            now = time.monotonic()
            state["credit"] += rate * (now - state["tick"])
            state["tick"] = now
        # Offered load that could not be dispatched (an outage) is not carried past one second of it.
        state["credit"] = min(state["credit"], max(rate, float(self.batch_max)))
        whole = min(self.batch_max, int(state["credit"]))
        state["credit"] -= whole
        return whole

    def produce(self) -> None:
        from django.db import connection

        from durable_django import enqueue_many

        state = {"credit": 0.0, "tick": time.monotonic()}
        self.producing.set()
        seq = 0
        failures = 0
        while not self.shutdown.is_set():
            count = self.next_batch(state)
            if count <= 0:
                continue
            inputs = [{"seq": seq + i, "created_at": time.time(), "padding": self.padding} for i in range(count)]
            try:
                enqueue_many(FUNCTION, inputs)
            except Exception as error:  # noqa: BLE001 - chaos makes every database error possible; go on
                failures += 1
                if failures in (1, 10) or failures % 100 == 0:
                    log(f"enqueue_many failed ({failures} so far): {type(error).__name__}: {error}")
                connection.close()
                self.shutdown.wait(0.2)
                continue
            seq += count
            with self.counts_lock:
                self.enqueued += count

    # ── observers ───────────────────────────────────────────────────────

    def receive(self) -> None:
        while not self.shutdown.is_set():
            try:
                data = self.receiver.recv(64)
            except TimeoutError:
                continue
            except OSError:
                return
            (latency_ms,) = struct.unpack("!d", data)
            self.latency.add(latency_ms)
            with self.counts_lock:
                self.completed += 1

    def poll_depth(self) -> None:
        import psycopg

        connection = None
        while not self.shutdown.wait(0.2):
            try:
                if connection is None or connection.closed:
                    connection = psycopg.connect(os.environ["DATABASE_URL"], autocommit=True, connect_timeout=5)
                row = connection.execute(DEPTH_SQL).fetchone()
                self.queue_depth = int(row[0]) if row else 0
            except psycopg.Error:
                connection = None
                self.shutdown.wait(0.5)

    def sample(self) -> None:
        """Every SAMPLE_EVERY_S, on the wall clock's multiples of it, one record per metric."""
        every = self.sample_every_s
        last_enqueued, last_completed, last_tick = 0, 0, time.monotonic()
        while True:
            delay = every - (time.time() % every)
            if self.shutdown.wait(delay):
                return
            now = time.monotonic()
            elapsed = max(0.001, now - last_tick)
            with self.counts_lock:
                enqueued, completed = self.enqueued, self.completed
            p50, p95, p99 = self.latency.percentiles(0.50, 0.95, 0.99)
            stamp = now_iso()
            for metric, value, window in [
                ("claim_p50_ms", p50, float(LATENCY_WINDOW_S)),
                ("claim_p95_ms", p95, float(LATENCY_WINDOW_S)),
                ("claim_p99_ms", p99, float(LATENCY_WINDOW_S)),
                ("enqueue_rate", (enqueued - last_enqueued) / elapsed, float(every)),
                ("completion_rate", (completed - last_completed) / elapsed, float(every)),
                ("queue_depth", float(self.queue_depth), 0.0),
                ("producer_target_rate", self.target_rate, 0.0),
            ]:
                if metric in OBSERVER_METRICS and instance_id() != 0:
                    continue
                emit(
                    {
                        "t": stamp,
                        "system": SYSTEM,
                        "kind": "adapter",
                        "subject_kind": "adapter",
                        "subject": "",
                        "metric": metric,
                        "value": value,
                        "window_s": window,
                    }
                )
            last_enqueued, last_completed, last_tick = enqueued, completed, now

    # ── life cycle ──────────────────────────────────────────────────────

    def run(self) -> int:
        import django
        from django.core.management import call_command

        django.setup()
        call_command("migrate", verbosity=0)
        emit(
            {
                "kind": "descriptor",
                "system": SYSTEM,
                "event_tables": EVENT_TABLES,
                "extensions": [],
                "version": version(),
                "schema_version": schema_version(),
                "db_name": urlparse(os.environ["DATABASE_URL"]).path.lstrip("/"),
                "started_at": now_iso(),
            }
        )
        processes, concurrency = self.worker_layout()
        log(f"{processes} durable_worker process(es) x {concurrency} threads; mode {self.mode}, pacing {self.pacing}")
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: self.shutdown.set())
        threads = [
            threading.Thread(target=self.supervise, name="supervisor", daemon=True),
            threading.Thread(target=self.receive, name="receiver", daemon=True),
            threading.Thread(target=self.poll_depth, name="depth", daemon=True),
            threading.Thread(target=self.sample, name="sampler", daemon=True),
            threading.Thread(target=self.produce, name="producer", daemon=True),
        ]
        if self.pacing == "harness" and self.mode == "fixed":
            threading.Thread(target=self.read_tokens, name="tokens", daemon=True).start()
        else:
            threading.Thread(target=drain_stdin, name="stdin", daemon=True).start()
        for thread in threads:
            thread.start()
        while not self.shutdown.wait(0.5):
            pass
        log(f"shutting down: {self.enqueued} enqueued, {self.completed} completed, {self.worker_restarts} restarts")
        self.stop_workers()
        self.finished.set()
        for thread in threads:
            thread.join(timeout=0.5)
        self.receiver.close()
        os.unlink(self.socket_path)
        os.rmdir(self.socket_dir)
        return 0


def drain_stdin() -> None:
    """Read and drop stdin, so a harness pacer writing to it never blocks on a full pipe."""
    for _ in sys.stdin:
        pass


def die_with_parent() -> None:
    """In a worker, before exec: SIGKILL when the adapter dies, as a killed container's processes do."""
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def version() -> str:
    import durable_django

    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=5, check=False
        ).stdout.strip()
    except OSError:
        commit = ""
    package = getattr(durable_django, "__version__", "")
    return "+".join(part for part in (package, commit) if part) or "unknown"


def schema_version() -> str:
    from django.db.migrations.recorder import MigrationRecorder

    last = MigrationRecorder.Migration.objects.filter(app="durable_django").order_by("-id").first()
    return last.name if last else "none"


def main() -> int:
    if ROOT not in sys.path:
        sys.path.insert(0, ROOT)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.harness.settings")
    return Adapter().run()


if __name__ == "__main__":
    raise SystemExit(main())
