"""The workload fuzzer's driver: the chaos soak's machinery (a private PostgreSQL, real workers, the
fault schedule) running the fuzzer's workload instead of the soak's plans.

On top of the soak's events it submits the drawn workload (with deadlines and debounce), cancels and
resumes runs, emits some signals from a second client inside a transaction held open up to a lease and
a half, and samples the tables twice a second for the head-of-line check (tests/fuzz/idle.py): due runs
no limit applies to that wait while a worker keeps a slot idle.
"""

from __future__ import annotations

import collections
import queue
import random
import threading
import time
from dataclasses import dataclass

from tests.chaos.harness import LEASE_SECONDS, POLL_SECONDS, Client, Emit, Soak
from tests.fuzz.idle import DueRun, IdleOracle, WorkerSample
from tests.fuzz.workload import Submission, draw_workload

# A due run no limit applies to may wait this long beside an idle worker (the claim loop's poll, and slack).
DUE_PATIENCE = POLL_SECONDS + 1.0
# Quiet: no fault since this many seconds (a fault's recovery is no head-of-line blocking), and a worker
# started at least this long ago (its first claims drain the backlog its absence left).
QUIET_AFTER_FAULT = LEASE_SECONDS + 3.0

# Per worker (by pid): the runs it holds, and the runs it ever claimed (its ended attempts and those held).
_WORKER_CLAIMS = """
SELECT split_part(worker_id, ':', -2), count(*) FILTER (WHERE held), count(*) FROM (
    SELECT worker_id, true AS held FROM durable_run WHERE status = 'running' AND worker_id IS NOT NULL
    UNION ALL
    SELECT worker_id, false FROM durable_attempt WHERE worker_id IS NOT NULL
) claims
GROUP BY 1
"""

# Due runs no limit applies to, with when each became due.
_DUE_UNLIMITED = """
SELECT run_id, name, extract(epoch FROM coalesce(available_at, updated_at))::float8 FROM durable_run
WHERE status = 'pending' AND held_by IS NULL AND concurrency_key IS NULL AND rate_key IS NULL
  AND coalesce(available_at, updated_at) <= now()
"""


@dataclass
class Waiting:
    """A due, unlimited run that waited while a worker kept a slot idle."""

    at: float
    run_id: str
    name: str
    waited: float
    worker_pid: int
    idle_slots: int
    # Limited sleepers whose sleep was over at that moment (a head-of-line block shows them).
    woken_limited: int


class Fuzz(Soak):
    def __init__(self, config, server, workers, tmp_path):
        super().__init__(config, server, workers, tmp_path)
        self.workload_rng = random.Random(f"{config.seed}:workload")
        self.holds_rng = random.Random(f"{config.seed}:holds")
        self.submissions: dict[int, Submission] = {}
        self.run_ids: dict[int, str] = {}
        self.cancelled: set[str] = set()
        self.resumed: set[str] = set()
        self.waiting: list[Waiting] = []
        self.held_emits: list[Emit] = []
        self._holds: queue.Queue = queue.Queue()
        self._holder: threading.Thread | None = None
        self._next_sample = 0.0
        self._idle = IdleOracle(DUE_PATIENCE)
        self._ready_at: dict[int, float] = {}  # pid -> when the worker was first seen started
        # Runs whose row a held client transaction locks now (no claim can take them), and when each let go.
        self._locked: collections.Counter = collections.Counter()
        self._unlocked_at: dict[str, float] = {}
        self._locks_guard = threading.Lock()

    # -- the schedule ---------------------------------------------------------------------------------

    def schedule_plans(self):
        for submission in draw_workload(self.workload_rng, self.config.chaos_seconds):
            self.submissions[submission.index] = submission
            self.at(submission.offset, "submit", submission)

    def _on_submit(self, submission: Submission):
        run_id = self.client.call(
            "enqueue", name=submission.name, input=submission.input, key=submission.key, options=submission.options
        )
        self.run_ids[submission.index] = run_id
        self.record.enqueued[submission.key] = run_id
        now = time.time() - self.record.origin
        if submission.cancel_after is not None:
            self.at(now + submission.cancel_after, "cancel", run_id)
        if submission.resume_after is not None:
            self.at(now + submission.resume_after, "resume", run_id)
        if submission.name == "fuzz.flow":
            self._schedule_signals(run_id, submission.input["ops"], within=6.0)

    def _on_cancel(self, run_id: str):
        self.cancelled.add(run_id)
        self.client.call("cancel", run_id=run_id)

    def _on_resume(self, run_id: str):
        self.resumed.add(run_id)
        self.client.call("resume", run_id=run_id)

    def _on_emit(self, emit: Emit):
        """A quarter of the signals are emitted inside a long transaction, by a second client (so the
        schedule goes on meanwhile)."""
        if self.holds_rng.random() < 0.25:
            self._holds.put((emit, round(self.holds_rng.uniform(0.5, 1.5 * LEASE_SECONDS), 2)))
            return
        super()._on_emit(emit)

    def _hold_emits(self):
        holder = Client(self.env, self.tmp_path / "holding-client.log")
        try:
            while (item := self._holds.get()) is not None:
                emit, hold = item
                emit.at = time.time()
                with self._locks_guard:
                    self._locked[emit.run_id] += 1
                try:
                    emit.stored = holder.call(
                        "signal", run_id=emit.run_id, signal=emit.signal, value=emit.value, hold=hold
                    )
                finally:
                    with self._locks_guard:
                        self._locked[emit.run_id] -= 1
                        self._unlocked_at[emit.run_id] = time.time()
                self.held_emits.append(emit)
        finally:
            holder.close()

    # -- the run ----------------------------------------------------------------------------------------

    def run(self):
        self._holder = threading.Thread(target=self._hold_emits, name="fuzz-holding-client", daemon=True)
        self._holder.start()
        try:
            return super().run()
        finally:
            self._holds.put(None)
            self._holder.join(timeout=60)
            self.record.emits += self.held_emits

    def _look_after_workers(self):
        super()._look_after_workers()
        self._sample_waiting()

    def _step(self):
        super()._step()
        if time.time() >= self._next_sample:
            self._sample_waiting()

    def _sample_waiting(self):
        """Due runs no limit applies to that waited longer than DUE_PATIENCE while a quiet worker (started, and
        hit by no fault, for QUIET_AFTER_FAULT) kept a slot idle: had a free slot in every sample and claimed
        nothing meanwhile (tests/fuzz/idle.py)."""
        now = time.time()
        self._next_sample = now + 0.5
        last_fault = max((fault.until for fault in self.record.faults), default=0.0)
        if now - last_fault < QUIET_AFTER_FAULT or any(
            worker.state in ("stopped", "terminating") for worker in self.record.workers
        ):
            self._idle.forget()
            return
        for worker in self.record.workers:
            if worker.state == "up" and self._ready(worker):
                self._ready_at.setdefault(worker.pid, now)
        quiet = {
            worker.pid: worker
            for worker in self.record.workers
            if worker.state == "up" and now - self._ready_at.get(worker.pid, now) >= QUIET_AFTER_FAULT
        }
        counts = {int(pid): (held, claims) for pid, held, claims in self.server.query(_WORKER_CLAIMS)}
        samples = [WorkerSample(pid, worker.concurrency, *counts.get(pid, (0, 0))) for pid, worker in quiet.items()]
        rows = self.server.query(_DUE_UNLIMITED)
        with self._locks_guard:
            due = [
                DueRun(run_id, name, due_since, self._unlocked_at.get(run_id, 0.0))
                for run_id, name, due_since in rows
                if self._locked[run_id] <= 0
            ]
        waited = self._idle.sample(now, samples, due)
        if not waited:
            return
        [(woken_limited,)] = self.server.query(
            "SELECT count(*) FROM durable_run WHERE status = 'waiting' AND available_at <= now() "
            "AND (concurrency_key IS NOT NULL OR rate_key IS NOT NULL)"
        )
        for item in waited:
            self.waiting.append(
                Waiting(now, item.run_id, item.name, item.waited, item.worker_pid, item.free_slots, woken_limited)
            )
