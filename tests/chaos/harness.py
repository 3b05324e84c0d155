"""The machinery of the chaos soak: a private PostgreSQL, a client process, real workers, plans and faults.

Everything random is drawn from one seed, in separate streams (plans, faults,
signals), so that a replay with the same seed submits the same runs and injects
the same faults in the same order at the same moments; which step a fault lands
in still depends on the machine's timing.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import json
import os
import random
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field

import psycopg

from tests.helpers import ROOT

# A short lease, so that a SIGSTOP past it and a SIGKILL's recovery happen within seconds.
LEASE_SECONDS = 3.0
POLL_SECONDS = 1.0
# Longer than any attempt of a chaos.flow plan: a SIGTERM lets every attempt finish.
GRACE_SECONDS = 20.0
WORKERS = 3
# Far above what the faults can cost a run, so that no run is failed for running out of recoveries.
MAX_RECOVERIES = 100
STEP_PAUSE = (0.1, 1.0)
SLEEP_SECONDS = (0.2, 1.5)
# Seconds between faults, on average, in the short soak and in a long one.
FAULT_EVERY_SHORT = 2.0
FAULT_EVERY = 4.0
# The retry policy of chaos.flow (tests/workflows/durable.py): fail 3 times and the run fails.
MAX_ATTEMPTS = 3


def step_id(name: str) -> str:
    return f"v1:{name}:0"


# -- plans ------------------------------------------------------------------------------------------------


def draw_plan(rng: random.Random, *, child: bool = False) -> list[dict]:
    """The ops of one chaos.flow run: steps, at most one flaky step, sleeps, signals, and (not in a
    child) up to two children, each waited for after it was spawned."""
    ops: list[dict] = []
    counter = itertools.count(1)
    unawaited: list[str] = []
    flaky = signals = spawned = 0

    def name(kind: str) -> str:
        return f"{kind}-{next(counter)}"

    for _ in range(rng.randint(2, 4) if child else rng.randint(3, 7)):
        roll = rng.random()
        if not child and roll < 0.25 and spawned < 2:
            spawned += 1
            unawaited.append(name("spawn"))
            ops.append({"op": "spawn", "name": unawaited[-1], "ops": draw_plan(rng, child=True)})
        elif roll < 0.35 and unawaited:
            ops.append({"op": "wait", "name": name("wait"), "child": unawaited.pop(0)})
        elif roll < 0.45:
            ops.append({"op": "sleep", "name": name("sleep"), "seconds": round(rng.uniform(*SLEEP_SECONDS), 2)})
        elif roll < 0.55 and signals < 2:
            signals += 1
            ops.append({"op": "signal", "name": name("signal"), "signal": f"go-{signals}"})
        elif roll < 0.63 and not flaky:
            # 3 failures use up the policy's 3 attempts: that run fails, and a parent sees its child fail.
            flaky += 1
            ops.append(
                {
                    "op": "flaky",
                    "name": name("flaky"),
                    "pause": round(rng.uniform(*STEP_PAUSE), 2),
                    "fail": rng.choice([1, 1, 2, 2, 3]),
                }
            )
        else:
            ops.append({"op": "step", "name": name("step"), "pause": round(rng.uniform(*STEP_PAUSE), 2)})
    ops += [{"op": "wait", "name": name("wait"), "child": child_name} for child_name in unawaited]
    return ops


# -- the private server ---------------------------------------------------------------------------------


class PrivateServer:
    """A PostgreSQL of the soak's own (pgserver), so that restarting it cuts off no other test."""

    def __init__(self):
        import pgserver

        # Not under pytest's tmp_path: pgserver runs PostgreSQL as its own user, which must reach the directory.
        self.server = pgserver.get_server(tempfile.mkdtemp(prefix="durable-chaos-pg-"), cleanup_mode="delete")
        self.uri = self.server.get_uri()
        self._conn: psycopg.Connection | None = None

    def query(self, sql: str, params=(), *, patience: float = 60.0) -> list[tuple]:
        """Rows of ``sql``, reconnecting through a restart."""
        give_up = time.monotonic() + patience
        while True:
            try:
                if self._conn is None or self._conn.closed:
                    self._conn = psycopg.connect(self.uri, autocommit=True, connect_timeout=5)
                cur = self._conn.execute(sql, params)
                return cur.fetchall() if cur.description else []
            except psycopg.OperationalError:
                self._drop()
                if time.monotonic() > give_up:
                    raise
                time.sleep(0.1)

    def restart(self) -> float:
        """``pg_ctl restart -m fast``; returns when a new connection is accepted."""
        from pgserver._commands import pg_ctl

        pg_ctl(["-w", "restart", "-m", "fast"], pgdata=self.server.pgdata, user=self.server.system_user)
        self._drop()
        self.query("SELECT 1", patience=30)
        return time.time()

    def _drop(self):
        if self._conn is not None:
            with contextlib.suppress(Exception):  # a broken connection is gone either way
                self._conn.close()
        self._conn = None

    def cleanup(self):
        self._drop()
        self.server.cleanup()


# -- the client process ---------------------------------------------------------------------------------


class Client:
    """``python -m tests.chaos.client`` on the private server (see that module)."""

    def __init__(self, env: dict, log_path):
        self.log_path = log_path
        with open(log_path, "w") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tests.chaos.client"],
                env=env,
                cwd=ROOT,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
                bufsize=1,
            )
        self.retries = 0

    def call(self, op: str, *, patience: float = 60.0, **request):
        self.proc.stdin.write(json.dumps({"op": op, "patience": patience, **request}) + "\n")
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], patience + 60)
        line = self.proc.stdout.readline() if ready else ""
        if not line:
            raise AssertionError(
                f"the chaos client gave no answer to {op} (exit code {self.proc.poll()}); see {self.log_path}"
            )
        reply = json.loads(line)
        self.retries += reply["retries"]
        if not reply["ok"]:
            raise AssertionError(f"the chaos client failed {op} {request}: {reply['error']}")
        return reply["result"]

    def close(self):
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc.stdout.close()


# -- workers and faults ----------------------------------------------------------------------------------


@dataclass
class ChaosWorker:
    name: str
    proc: subprocess.Popen
    concurrency: int
    started_at: float
    # up, stopped (SIGSTOP), terminating (SIGTERM sent), killed (SIGKILL), exited, died (on its own), hung
    state: str = "up"
    exit_code: int | None = None
    term_at: float | None = None
    exited_at: float | None = None
    ready: bool = False  # it logged its start: its signal handlers are in and its preflight is done

    @property
    def pid(self) -> int:
        return self.proc.pid


@dataclass
class Fault:
    kind: str  # SIGKILL, SIGSTOP, SIGTERM, restart
    at: float  # time.time() when it was injected
    until: float  # SIGSTOP: when SIGCONT was sent; restart: when the server accepted connections again
    worker: str | None = None
    pid: int | None = None
    concurrency: int = 0
    # SIGTERM: the worker released runs whose attempts outlived the grace period (re-executed elsewhere).
    grace_ran_out: bool = False

    def describe(self, origin: float) -> str:
        target = f" {self.worker} (pid {self.pid}, concurrency {self.concurrency})" if self.worker else ""
        span = f" until +{self.until - origin:.2f}s" if self.until > self.at else ""
        return f"+{self.at - origin:6.2f}s {self.kind}{target}{span}"


@dataclass
class Emit:
    run_id: str
    signal: str
    value: object
    stored: object = None
    at: float = 0.0


@dataclass
class SoakConfig:
    seed: int
    chaos_seconds: float
    drain_seconds: float

    @property
    def short(self) -> bool:
        return self.chaos_seconds <= 120


@dataclass
class SoakRecord:
    """Everything the checks need, gathered while the soak ran."""

    config: SoakConfig
    origin: float = 0.0
    chaos_ended: float = 0.0
    drained: float = 0.0
    enqueued: dict[str, str] = field(default_factory=dict)  # idempotency key -> run id
    faults: list[Fault] = field(default_factory=list)
    emits: list[Emit] = field(default_factory=list)
    workers: list[ChaosWorker] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    live_after_drain: list[tuple] = field(default_factory=list)
    stranded: list = field(default_factory=list)


class Soak:
    """Submits plans, emits signals and injects faults on a schedule drawn from the seed, then drains."""

    def __init__(self, config: SoakConfig, server: PrivateServer, workers, tmp_path):
        self.config = config
        self.server = server
        self.pool = workers  # the `workers` fixture: starts processes, logs them, kills them at teardown
        self.tmp_path = tmp_path
        self.record = SoakRecord(config)
        self.env = workers.env(
            DATABASE_URL=server.uri,
            DURABLE_TEST_LEASE_SECONDS=LEASE_SECONDS,
            DURABLE_TEST_POLL_SECONDS=POLL_SECONDS,
            DURABLE_TEST_MAX_RECOVERIES=MAX_RECOVERIES,
            DURABLE_TEST_LOG_TIMES=1,
        )
        self.plans_rng = random.Random(f"{config.seed}:plans")
        self.faults_rng = random.Random(f"{config.seed}:faults")
        self.signals_rng = random.Random(f"{config.seed}:signals")
        self._events: list = []
        self._sequence = itertools.count()
        self._signalled_children: set[str] = set()
        self.client: Client | None = None

    # -- setup -----------------------------------------------------------------------------------------

    def manage(self, *args) -> str:
        result = subprocess.run(
            [sys.executable, "-m", "django", *args], env=self.env, cwd=ROOT, capture_output=True, text=True, timeout=180
        )
        assert result.returncode == 0, result.stderr
        return result.stdout

    def start_worker(self) -> ChaosWorker:
        concurrency = self.faults_rng.randint(2, 4)
        proc = self.pool.start("--concurrency", str(concurrency), "--grace", str(GRACE_SECONDS), env=self.env)
        worker = ChaosWorker(f"w{len(self.record.workers)}", proc, concurrency, time.time())
        self.record.workers.append(worker)
        return worker

    def log(self, worker: ChaosWorker) -> str:
        return self.pool.output(worker.proc)

    # -- the schedule --------------------------------------------------------------------------------------

    def at(self, offset: float, kind: str, payload=None):
        heapq.heappush(self._events, (self.record.origin + offset, next(self._sequence), kind, payload))

    def schedule(self):
        """Every submit and fault of the chaos window, drawn from the seed."""
        self.schedule_plans()
        self.schedule_faults()

    def schedule_plans(self):
        seconds = self.config.chaos_seconds
        # Plans: a burst at the start, then about 1.5 a second until 80% through the window.
        offsets = [0.0] * 8
        while (offset := offsets[-1] + self.plans_rng.expovariate(1.5)) < 0.8 * seconds:
            offsets.append(offset)
        for index, offset in enumerate(offsets):
            self.at(offset, "enqueue", (index, draw_plan(self.plans_rng)))

    def schedule_faults(self):
        seconds = self.config.chaos_seconds
        # Faults: one every ~2s in the short soak (they overlap: a SIGSTOP lasts past the lease) and every
        # ~4s in a long one; each signal at least twice, one or two PostgreSQL restarts in the short soak
        # and one every ~90s in a long one.
        restarts = self.faults_rng.choice([1, 2]) if self.config.short else max(2, int(seconds // 90))
        count = max(int(seconds // (FAULT_EVERY_SHORT if self.config.short else FAULT_EVERY)), 6 + restarts)
        kinds = ["SIGKILL", "SIGSTOP", "SIGTERM"] * 2 + ["restart"] * restarts
        kinds += self.faults_rng.choices(["SIGKILL", "SIGSTOP", "SIGTERM"], weights=[3, 3, 2], k=count - len(kinds))
        self.faults_rng.shuffle(kinds)
        span = (seconds - 4.0) / len(kinds)
        for index, kind in enumerate(kinds):
            self.at(2.5 + index * span + self.faults_rng.uniform(0, 0.8 * span), "fault", kind)

    # -- the run -----------------------------------------------------------------------------------------

    def run(self) -> SoakRecord:
        record = self.record
        self.manage("migrate", "durable_django", "-v", "0")
        self.client = Client(self.env, self.tmp_path / "client.log")
        for _ in range(WORKERS):
            self.start_worker()
        for worker in record.workers:
            _wait_for(lambda worker=worker: "starting" in self.log(worker), 60, f"{worker.name} to start")
        record.origin = time.time()
        self.schedule()
        self.chaos_end = record.origin + self.config.chaos_seconds
        next_look = 0.0
        # The window, and past it until every stopped worker has had its SIGCONT.
        while time.time() < self.chaos_end or any(worker.state == "stopped" for worker in self.record.workers):
            self._step()
            if time.time() >= next_look:
                self._look_after_workers()
                self._signal_new_children()
                next_look = time.time() + 1.0
        record.chaos_ended = time.time()
        self._events = [event for event in self._events if event[2] == "emit"]
        heapq.heapify(self._events)
        self._drain()
        record.drained = time.time()
        record.stranded = self.client.call("stranded")
        self._stop_workers()
        return record

    def _step(self):
        if not self._events:
            time.sleep(0.05)
            return
        when, _, kind, payload = self._events[0]
        now = time.time()
        if when > now:
            time.sleep(min(when - now, 0.05))
            return
        heapq.heappop(self._events)
        getattr(self, f"_on_{kind}")(payload)

    def _on_enqueue(self, payload):
        index, ops = payload
        key = f"chaos-{self.config.seed}-{index}"
        run_id = self.client.call("enqueue", name="chaos.flow", input={"ops": ops}, key=key)
        self.record.enqueued[key] = run_id
        self._schedule_signals(run_id, ops, within=6.0)

    def _schedule_signals(self, run_id: str, ops: list[dict], *, within: float):
        """Emit each signal a plan waits for at a random moment (before or after the wait), and now and
        then emit it a second time with another value, which must not win."""
        now = time.time() - self.record.origin
        for op in ops:
            if op["op"] != "signal":
                continue
            first = now + self.signals_rng.uniform(0, within)
            value = {"run": run_id, "signal": op["signal"], "nonce": self.signals_rng.getrandbits(32)}
            self.at(first, "emit", Emit(run_id, op["signal"], value))
            if self.signals_rng.random() < 0.25:
                late = {**value, "nonce": self.signals_rng.getrandbits(32), "duplicate": True}
                self.at(first + self.signals_rng.uniform(0.2, 4.0), "emit", Emit(run_id, op["signal"], late))

    def _on_emit(self, emit: Emit):
        emit.at = time.time()
        emit.stored = self.client.call("signal", run_id=emit.run_id, signal=emit.signal, value=emit.value)
        self.record.emits.append(emit)

    def _signal_new_children(self):
        """Children are spawned by the workers; once one exists, schedule the signals its plan waits for."""
        rows = self.server.query(
            "SELECT run_id, input::text FROM durable_run WHERE parent_run_id IS NOT NULL AND run_id <> ALL(%s)",
            [list(self._signalled_children)],
        )
        for run_id, input_text in rows:
            self._signalled_children.add(run_id)
            self._schedule_signals(run_id, json.loads(input_text)["ops"], within=3.0)

    # -- faults -------------------------------------------------------------------------------------------

    def _ready(self, worker: ChaosWorker) -> bool:
        """Whether the worker has started. Before that a SIGTERM kills it (no handler yet) and a restart cuts its
        preflight, and it exits: faults are for running workers, as a process manager starts them again."""
        if not worker.ready and " starting: " in self.log(worker):
            worker.ready = True
        return worker.ready

    def _target(self) -> ChaosWorker | None:
        """A started worker that is up, one running attempts if there is one (a fault there hits steps in flight)."""
        up = [worker for worker in self.record.workers if worker.state == "up" and self._ready(worker)]
        holders = {
            row[0].split(":")[-2]
            for row in self.server.query(
                "SELECT worker_id FROM durable_run WHERE status = 'running' AND worker_id IS NOT NULL"
            )
        }
        busy = [worker for worker in up if str(worker.pid) in holders]
        candidates = busy or up
        return self.faults_rng.choice(candidates) if candidates else None

    def _on_fault(self, kind: str):
        now = time.time()
        if now >= self.chaos_end:
            return  # put off past the window: the faults are over
        if kind == "restart":
            if not all(self._ready(worker) for worker in self.record.workers if worker.state == "up"):
                self.at(now + 0.5 - self.record.origin, "fault", kind)  # a worker is starting: a little later
                return
            until = self.server.restart()
            self.record.faults.append(Fault("restart", now, until))
            return
        worker = self._target()
        up = sum(worker.state == "up" and worker.ready for worker in self.record.workers)
        if worker is None or (kind == "SIGSTOP" and up < 2):
            self.at(now + 0.5 - self.record.origin, "fault", kind)  # no worker to spare now: a little later
            return
        worker.proc.send_signal(getattr(signal, kind))
        # Taken once the signal is sent: an execution recorded before this instant began before the fault.
        sent = time.time()
        fault = Fault(kind, sent, sent, worker.name, worker.pid, worker.concurrency)
        self.record.faults.append(fault)
        if kind == "SIGKILL":
            worker.exit_code = worker.proc.wait(timeout=30)
            worker.state, worker.exited_at = "killed", time.time()
            self.start_worker()
        elif kind == "SIGSTOP":
            worker.state = "stopped"
            pause = LEASE_SECONDS + self.faults_rng.uniform(1.0, 2.5)
            # From a timer, not this loop: a client call may be waiting on a row lock the stopped worker holds
            # (SIGSTOP lands mid-transaction too), and the loop is blocked in that call until the SIGCONT.
            resume = threading.Timer(pause, self._resume, (worker, fault))
            resume.daemon = True
            resume.start()
        elif kind == "SIGTERM":
            worker.state, worker.term_at = "terminating", sent
            self.start_worker()

    def _resume(self, worker: ChaosWorker, fault: Fault):
        worker.proc.send_signal(signal.SIGCONT)
        fault.until = time.time()
        worker.state = "up"

    def _look_after_workers(self):
        """Reap SIGTERMed workers; note any worker that died or hangs on its own, and replace it."""
        for worker in self.record.workers:
            code = worker.proc.poll()
            if worker.state == "terminating":
                if code is not None:
                    worker.state, worker.exit_code, worker.exited_at = "exited", code, time.time()
                    # A worker SIGTERMed while Python still loads it (its log has no "starting:" line yet) dies
                    # of the signal before its handler exists: it held nothing, so nothing is lost.
                    booting = code == -signal.SIGTERM and " starting: " not in self.log(worker)
                    if code != 0 and not booting:
                        self.record.problems.append(f"{worker.name} (pid {worker.pid}) exited {code} after SIGTERM")
                    fault = next((f for f in self.record.faults if f.pid == worker.pid), None)
                    if fault is not None and "still running after the grace period" in self.log(worker):
                        fault.grace_ran_out = True
                elif time.time() - worker.term_at > GRACE_SECONDS + 15:
                    self.record.problems.append(
                        f"{worker.name} (pid {worker.pid}) still running {GRACE_SECONDS + 15:.0f}s after SIGTERM"
                    )
                    worker.proc.kill()
                    worker.proc.wait(timeout=30)
                    worker.state = "hung"
            elif worker.state == "up" and code is not None:
                worker.state, worker.exit_code, worker.exited_at = "died", code, time.time()
                last = self.log(worker).strip().splitlines()[-1:]
                self.record.problems.append(
                    f"{worker.name} (pid {worker.pid}) died on its own with exit code {code}; last log line: {last}"
                )
                self.start_worker()

    # -- the end --------------------------------------------------------------------------------------------

    def _live(self) -> list[tuple]:
        return self.server.query(
            "SELECT run_id, status, waiting_for, leased_until, attempts, worker_id FROM durable_run "
            "WHERE status IN ('pending', 'running', 'waiting') ORDER BY created_at"
        )

    def _drain(self):
        """No fault from here on; signals are still emitted. Wait, bounded, for every run to end."""
        give_up = time.time() + self.config.drain_seconds
        next_look = 0.0
        while time.time() < give_up:
            self._step()
            if time.time() >= next_look:
                self._look_after_workers()
                self._signal_new_children()
                next_look = time.time() + 0.5
                if not self._events and not self._live():
                    return
        self.record.live_after_drain = self._live()

    def _stop_workers(self):
        """SIGTERM every worker still up: each must exit 0 within its grace period."""
        for worker in self.record.workers:
            if worker.state == "up":
                worker.proc.send_signal(signal.SIGTERM)
                worker.state, worker.term_at = "terminating", time.time()
        _wait_for(
            lambda: not any(w.state == "terminating" and w.proc.poll() is None for w in self.record.workers),
            GRACE_SECONDS + 15,
            "the workers to exit after SIGTERM",
            fail=False,
        )
        self._look_after_workers()


def _wait_for(predicate, timeout: float, what: str, *, fail: bool = True) -> bool:
    give_up = time.monotonic() + timeout
    while time.monotonic() < give_up:
        if predicate():
            return True
        time.sleep(0.1)
    if fail:
        raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
    return False


def read_effects(directory) -> tuple[dict[str, list[dict]], list[str]]:
    """Each run's recorded step executions (tests.workflows.durable._chaos_execution), and unreadable lines."""
    executions: dict[str, list[dict]] = {}
    unreadable = []
    for entry in os.scandir(directory):
        if not entry.name.startswith("chaos-"):
            continue
        run_id = entry.name[len("chaos-") :]
        with open(entry.path) as handle:
            for line in handle:
                try:
                    executions.setdefault(run_id, []).append(json.loads(line))
                except ValueError:
                    unreadable.append(f"{entry.name}: {line!r}")
    return executions, unreadable
