"""The claim loop of ``manage.py durable_worker``.

One thread claims in batches to fill free slots and sleeps on an event that a
NOTIFY, a finished attempt or the poll timeout sets. Slot threads execute
attempts. A heartbeat thread renews every held lease in one statement and
carries cancel requests back. Every thread keeps its own database connection
and replaces it only when it breaks.
"""

from __future__ import annotations

import logging
import os
import queue
import random
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field

from django.db import DatabaseError

from ..conf import durable_settings
from ..engine import execute as executor
from ..engine.attempt import Attempt
from ..registry import registry
from ..store import journal as journal_store
from ..store import runs as run_store
from ..store.db import WAKE_CHANNEL, reset_connection
from ..types import ClaimedRun
from .listener import Listener

logger = logging.getLogger("durable_django.worker")

# Claimed runs that may wait for a slot, per slot: one batch ahead of the slots.
PREFETCH_FACTOR = 1
# What a slot reports for a successful attempt handed to the claim loop for batch landing.
LANDING = "landing"


@dataclass
class WorkerOptions:
    concurrency: int = 4
    functions: list[str] | None = None
    queues: list[str] | None = None
    tenant_id: str | None = None
    burst: bool = False
    grace: float = 30.0
    scheduler: bool = True
    worker_id: str = field(default_factory=lambda: f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}")


@dataclass
class Stats:
    claimed: int = 0
    outcomes: dict = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)

    def count(self, outcome: str) -> None:
        self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1


def claim_batch(limit: int, worker_id: str, bounds: dict) -> list[Attempt]:
    """Claim up to ``limit`` runs and load the journals of those that ran before."""
    claimed = run_store.claim(limit=limit, lease_seconds=durable_settings.LEASE_SECONDS, worker_id=worker_id,
                              bounds=bounds)
    # A first attempt has an empty journal: skip the read.
    journals = journal_store.load_journal([run.run_id for run, _, _ in claimed if run.attempts > 1])
    return [
        Attempt(ClaimedRun(run=run, token=run.attempts, journal=journals.get(run.run_id, {}), recovered=recovered),
                database_now)
        for run, recovered, database_now in claimed
    ]


def claim_bounds(options: WorkerOptions) -> dict:
    return run_store.claim_filter(
        pairs=registry.pairs(options.functions), task_paths=True, names=options.functions,
        queues=options.queues, tenant_id=options.tenant_id,
    )


class Worker:
    def __init__(self, options: WorkerOptions):
        self.options = options
        self.stats = Stats()
        self._bounds = claim_bounds(options)
        self._stopping = threading.Event()  # stop claiming
        self._halt = threading.Event()  # stop the helper threads
        self._wake = threading.Event()
        self._active: dict[str, Attempt] = {}
        self._active_lock = threading.Lock()
        self._slots: queue.Queue = queue.Queue()
        # Successful attempts waiting to be landed in a batch: (attempt, output JSON).
        self._finished: queue.Queue = queue.Queue()
        self._threads: list[threading.Thread] = []

    # -- control --------------------------------------------------------------

    def request_stop(self) -> None:
        """Graceful stop: claim nothing more, let attempts finish within the grace period."""
        if not self._stopping.is_set():
            logger.info("worker %s stopping: finishing %d attempt(s) within %.0fs",
                        self.options.worker_id, len(self._active), self.options.grace)
        self._stopping.set()
        self._wake.set()

    @property
    def active_count(self) -> int:
        with self._active_lock:
            return len(self._active)

    # -- main loop ---------------------------------------------------------------

    def run(self) -> None:
        opts = self.options
        logger.info("worker %s starting: concurrency %d, functions %s, queues %s, tenant %s",
                    opts.worker_id, opts.concurrency, ",".join(n for n, _ in registry.pairs(opts.functions)) or "-",
                    ",".join(opts.queues or ["*"]), opts.tenant_id or "*")
        self._start_threads()
        try:
            self._claim_loop()
        finally:
            self._shutdown()

    def _start_threads(self) -> None:
        for index in range(self.options.concurrency):
            thread = threading.Thread(target=self._slot_loop, name=f"durable-slot-{index}", daemon=True)
            thread.start()
            self._threads.append(thread)
        heartbeat = threading.Thread(target=self._heartbeat_loop, name="durable-heartbeat", daemon=True)
        heartbeat.start()
        self._threads.append(heartbeat)
        self._listener = Listener([WAKE_CHANNEL], self._on_notify, self._halt, on_reconnect=self._wake.set)
        self._listener.start()
        if self.options.scheduler and not self.options.burst:
            from ..scheduler import SchedulerThread

            self._scheduler = SchedulerThread(self.options, self._halt)
            self._scheduler.start()

    def _land_later(self, attempt: Attempt, output: str) -> str:
        """Queue a successful attempt for the claim loop, which lands a batch in one statement."""
        self._finished.put((attempt, output))
        self._wake.set()
        return LANDING

    def _land_finished(self) -> None:
        """Land every queued successful attempt in one statement and free their places."""
        batch = []
        while True:
            try:
                batch.append(self._finished.get_nowait())
            except queue.Empty:
                break
        if not batch:
            return
        try:
            landed = run_store.complete_many([(a.run.run_id, a.token, output) for a, output in batch])
        except DatabaseError as exc:
            logger.warning("landing %d completed run(s) failed (%s); retrying", len(batch), exc)
            reset_connection()
            for item in batch:
                self._finished.put(item)
            raise
        for attempt, _ in batch:
            self.stats.count(executor.report_success(attempt, attempt.run.run_id in landed))
            with self._active_lock:
                self._active.pop(attempt.run.run_id, None)

    def _on_notify(self, channel: str, payload: str) -> None:
        if self.options.queues is None or payload in self.options.queues:
            self._wake.set()

    def _room_to_claim(self) -> int:
        """How many runs to claim now: fill idle slots at once, top up the prefetch in batches.

        Up to ``concurrency`` claimed runs wait in a local queue beside the busy
        slots, so a slot that frees finds work without a round trip and claims
        come in batches rather than one run per finished attempt.
        """
        concurrency = self.options.concurrency
        in_flight = self.active_count
        room = concurrency * (1 + PREFETCH_FACTOR) - in_flight
        if in_flight < concurrency or room >= max(1, concurrency // 2):
            return room
        return 0

    def _claim_loop(self) -> None:
        poll = durable_settings.POLL_SECONDS
        backoff = 0.1
        next_summary = time.monotonic() + durable_settings.SUMMARY_SECONDS
        while not self._stopping.is_set():
            self._wake.clear()
            claimed: list[Attempt] = []
            timeout = poll * random.uniform(0.95, 1.05)
            try:
                self._land_finished()
            except DatabaseError:
                self._stopping.wait(backoff)
                backoff = min(backoff * 2, 5.0)
                continue
            free = self._room_to_claim()
            if free > 0:
                try:
                    claimed = claim_batch(free, self.options.worker_id, self._bounds)
                    if len(claimed) < free:
                        due = run_store.seconds_until_next_due(self._bounds)
                        if due is not None:
                            timeout = min(timeout, max(due, 0.005))
                    backoff = 0.1
                except DatabaseError as exc:
                    logger.warning("claim failed (%s); retrying in %.1fs", exc, backoff)
                    reset_connection()
                    self._stopping.wait(backoff)
                    backoff = min(backoff * 2, 5.0)
                    continue
                for attempt in claimed:
                    self._dispatch(attempt)
            if self.options.burst and not claimed and self.active_count == 0:
                logger.info("worker %s: nothing claimable now (--burst); exiting", self.options.worker_id)
                return
            if time.monotonic() >= next_summary:
                self._log_summary()
                next_summary = time.monotonic() + durable_settings.SUMMARY_SECONDS
            if claimed and len(claimed) == free:
                continue  # maybe more is due: claim again once a slot is free
            self._wake.wait(timeout)

    def _dispatch(self, attempt: Attempt) -> None:
        run = attempt.run
        with self._active_lock:
            self._active[run.run_id] = attempt
        self.stats.claimed += 1
        logger.info("claimed run %s (%s v%s) attempt %d%s", run.run_id, run.name, run.version, attempt.token,
                    " (recovered from a dead worker)" if attempt.recovered else "")
        self._slots.put(attempt)

    def _slot_loop(self) -> None:
        while True:
            attempt = self._slots.get()
            if attempt is None:
                return
            try:
                outcome = executor.execute(attempt, land_success=self._land_later)
                if outcome == LANDING:
                    continue  # the claim loop lands it with others, then frees its place
            except DatabaseError as exc:
                logger.warning("run %s: database error while landing (%s); its lease will expire and it will "
                               "be recovered", attempt.run.run_id, exc)
                reset_connection()
                outcome = "error"
            except Exception:  # noqa: BLE001 - a bug here must not kill the slot
                logger.exception("run %s: unexpected error in the worker", attempt.run.run_id)
                outcome = "error"
            self.stats.count(outcome)
            with self._active_lock:
                self._active.pop(attempt.run.run_id, None)
            self._wake.set()

    # -- leases ---------------------------------------------------------------------

    def _heartbeat_loop(self) -> None:
        lease = durable_settings.LEASE_SECONDS
        last_renewal = time.monotonic()
        while not self._halt.wait(durable_settings.heartbeat_seconds):
            with self._active_lock:
                attempts = list(self._active.values())
            if not attempts:
                last_renewal = time.monotonic()
                continue
            try:
                renewed = run_store.heartbeat([a.held for a in attempts], lease)
                last_renewal = time.monotonic()
            except DatabaseError as exc:
                reset_connection()
                if time.monotonic() - last_renewal > lease * 2 / 3:
                    logger.warning("heartbeat failing for 2/3 of a lease (%s): treating leases as lost", exc)
                    for attempt in attempts:
                        attempt.stop(lost=True)
                continue
            for attempt in attempts:
                run_id = attempt.run.run_id
                if run_id not in renewed:
                    if attempt.run.run_id in self._active:
                        logger.warning("run %s: lease lost; stopping its attempt", run_id)
                        attempt.stop(lost=True)
                elif renewed[run_id] and attempt.begin_cancel():
                    self._cancel_at_heartbeat(attempt)

    def _cancel_at_heartbeat(self, attempt: Attempt) -> None:
        try:
            landed = run_store.cancel_held(*attempt.held)
        except DatabaseError:
            reset_connection()
            return
        if landed:
            logger.info("run %s cancelled at heartbeat; stopping its attempt", attempt.run.run_id)
            attempt.stop(cancelled=True, lost=True)

    # -- shutdown ---------------------------------------------------------------------

    def _shutdown(self) -> None:
        self._release_unstarted()
        deadline = time.monotonic() + self.options.grace
        while self.active_count and time.monotonic() < deadline:
            try:
                self._land_finished()
            except DatabaseError:
                pass  # kept queued; tried again until the grace period ends
            time.sleep(0.02)
        try:
            self._land_finished()
        except DatabaseError:
            pass
        with self._active_lock:
            left = [attempt for attempt in self._active.values()]
        if left:
            for attempt in left:
                attempt.stop(lost=True)
            try:
                released = run_store.release([attempt.held for attempt in left])
                logger.info("released %d run(s) still running after the grace period", released)
            except DatabaseError as exc:
                logger.warning("could not release held runs (%s); their leases will expire", exc)
        self._halt.set()
        for _ in range(self.options.concurrency):
            self._slots.put(None)
        self._log_summary()
        logger.info("worker %s stopped", self.options.worker_id)

    def _release_unstarted(self) -> None:
        """Hand back the prefetched runs no slot has started, at once: the grace period is for attempts."""
        unstarted = []
        while True:
            try:
                attempt = self._slots.get_nowait()
            except queue.Empty:
                break
            if attempt is not None:
                unstarted.append(attempt)
        if not unstarted:
            return
        try:
            run_store.release([attempt.held for attempt in unstarted])
        except DatabaseError as exc:
            logger.warning("could not release prefetched runs (%s); their leases will expire", exc)
        with self._active_lock:
            for attempt in unstarted:
                self._active.pop(attempt.run.run_id, None)

    def _log_summary(self) -> None:
        elapsed = max(time.monotonic() - self.stats.started, 1e-9)
        done = sum(self.stats.outcomes.values())
        logger.info(
            "summary: claimed %d, running %d, succeeded %d, failed %d, retrying %d, suspended %d, "
            "cancelled %d, %.1f runs/s",
            self.stats.claimed, self.active_count, self.stats.outcomes.get("succeeded", 0),
            self.stats.outcomes.get("failed", 0), self.stats.outcomes.get("retrying", 0),
            self.stats.outcomes.get("suspended", 0), self.stats.outcomes.get("cancelled", 0), done / elapsed,
        )
