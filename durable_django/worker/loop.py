"""The claim loop of ``manage.py durable_worker``.

One thread claims in batches to fill idle slots (and, while attempts are
short, a batch ahead of them) and sleeps on an event that a NOTIFY, a
finished attempt or the poll timeout sets. Slot threads execute attempts. The
heartbeat thread renews leases, the listener thread hears NOTIFY (behind a
transaction pooler only through ``LISTEN_DATABASE``; without one the poll
wakes the loop), the scheduler thread fires cron schedules. The engine's reads
and writes, from every thread, share a few connections
(``DURABLE["ENGINE_CONNECTIONS"]``, see ``engine/lifecycle.py``); the listener
keeps a session of its own, and a handler's own queries use its slot thread's
connection. A broken connection is replaced; no thread may die of an error.

When the database cannot be reached the worker stops starting attempts and
drops the claimed runs it had not started (their leases expire; reclaiming
them counts no recovery), while attempts already running keep what their
steps returned and write it once the database answers again.

Time limits are the claim loop's too (``worker/time_limits.py``): it fails runs
past their deadline, ends attempts past their timeout, and exits with status 3
when more than ``--max-abandoned`` handler threads stay stuck.
"""

from __future__ import annotations

import itertools
import logging
import os
import random
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from django.db import DatabaseError, close_old_connections, connections

from .. import faults
from ..conf import durable_settings
from ..engine import execute as executor
from ..engine import lifecycle, telemetry
from ..engine.attempt import Attempt
from ..engine.execute import Outcome
from ..engine.reconciler import Repair
from ..registry import registry
from .heartbeat import Heartbeat
from .landings import PendingLandings
from .listener import Listener
from .reconciler import ReconcilerThread
from .scheduler import SchedulerThread
from .slots import PREFETCH_HOLD_SECONDS, SlotPool
from .stats import Stats
from .time_limits import EXIT_ABANDONED, TimeLimitKeeper

if TYPE_CHECKING:
    from .metrics import WorkerMetrics

logger = logging.getLogger("durable_django.worker")


@dataclass
class WorkerOptions:
    concurrency: int = 4
    functions: list[str] | None = None
    queues: list[str] | None = None
    tenant_id: str | None = None
    burst: bool = False
    grace: float = 30.0
    scheduler: bool = True
    # More threads than this still stuck past their time limit: release everything and exit (status 3).
    max_abandoned: int = 4
    worker_id: str = field(default_factory=lambda: f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}")

    def claim_bounds(self) -> lifecycle.ClaimBounds:
        return lifecycle.claim_bounds(functions=self.functions, queues=self.queues, tenant_id=self.tenant_id)


class Worker:
    """A worker process's claim loop and threads.

    Args:
        options: what it runs, and how.
        metrics: its Prometheus metrics (``--metrics-port``), fed while it runs and closed when it stops.
    """

    def __init__(self, options: WorkerOptions, *, metrics: WorkerMetrics | None = None) -> None:
        self.options = options
        self.stats = Stats()
        self.pool = SlotPool(options.concurrency)
        self.metrics = metrics
        # What it records about itself in durable_worker, at start and with every heartbeat.
        self.identity = lifecycle.worker_identity(
            worker_id=options.worker_id,
            functions=options.functions,
            queues=options.queues,
            tenant_id=options.tenant_id,
            concurrency=options.concurrency,
        )
        self._bounds = options.claim_bounds()
        self._stopping = threading.Event()  # stop claiming
        self._halt = threading.Event()  # stop the helper threads
        self._wake = threading.Event()
        self._threads: list[threading.Thread] = []
        self._database_reachable = True
        # Slot threads that replace abandoned ones get indexes of their own.
        self._slot_indexes = itertools.count(options.concurrency)
        self.landings = PendingLandings(self.pool, self.stats, on_database=self._on_database, wake=self._wake.set)
        self.time_limits = TimeLimitKeeper(self.pool, self.stats, replace_slot=self._replace_slot)
        # The process's exit status once run() returns: EXIT_ABANDONED after too many stuck threads.
        self.exit_code = 0

    # -- control --------------------------------------------------------------

    def request_stop(self) -> None:
        """Graceful stop: claim nothing more, let attempts finish within the grace period."""
        if not self._stopping.is_set():
            logger.info(
                "worker %s stopping: finishing %d attempt(s) within %.0fs",
                self.options.worker_id,
                self.pool.held_count,
                self.options.grace,
            )
        self._stopping.set()
        self._wake.set()

    @property
    def active_count(self) -> int:
        return self.pool.held_count

    def _on_database(self, reachable: bool) -> None:
        """Note whether the database answers; on losing it, drop the claimed runs not started yet."""
        if reachable == self._database_reachable:
            return
        self._database_reachable = reachable
        if reachable:
            logger.info("worker %s: the database answers again", self.options.worker_id)
            self._wake.set()
            return
        dropped = self.pool.take_prefetched()
        self.pool.forget(dropped)
        logger.warning(
            "worker %s: the database cannot be reached; starting no attempt until it answers "
            "(dropped %d claimed run(s) not started)",
            self.options.worker_id,
            len(dropped),
        )

    # -- main loop ---------------------------------------------------------------

    def run(self) -> None:
        opts = self.options
        logger.info(
            "worker %s starting: concurrency %d, functions %s, queues %s, tenant %s",
            opts.worker_id,
            opts.concurrency,
            ",".join(n for n, _ in registry.pairs(opts.functions)) or "-",
            ",".join(opts.queues or ["*"]),
            opts.tenant_id or "*",
        )
        if self.metrics is not None:
            self.metrics.track(self.pool)
            telemetry.observe(self.metrics)
        with lifecycle.engine_connections(opts.worker_id):
            self._record_presence(lifecycle.worker_started, "record itself")
            self._start_threads()
            try:
                self._claim_loop()
            finally:
                self._shutdown()

    def _record_presence(self, write: Callable[[lifecycle.WorkerIdentity], None], what: str) -> None:
        """Write this worker's row; a database that cannot take it now only delays the workers page."""
        try:
            write(self.identity)
        except DatabaseError as exc:
            lifecycle.reset_connection()
            logger.warning("worker %s could not %s in durable_worker (%s)", self.options.worker_id, what, exc)

    def _start_threads(self) -> None:
        for index in range(self.options.concurrency):
            self._start_slot(index)
        self._start(
            Heartbeat(self.pool, self._halt, self._on_database, on_beat=lambda: lifecycle.worker_seen(self.identity))
        )
        if durable_settings.listen_database is None:
            logger.warning(
                "worker %s: DURABLE['DATABASE'] %r goes through a transaction pooler (DISABLE_SERVER_SIDE_CURSORS) "
                "and no DURABLE['LISTEN_DATABASE'] bypasses it, so there is no LISTEN: polling every %ss instead "
                "(set LISTEN_DATABASE to an alias that reaches PostgreSQL directly to wake within milliseconds)",
                self.options.worker_id,
                durable_settings.DATABASE,
                durable_settings.POLL_SECONDS,
            )
        else:
            self._start(Listener([lifecycle.WAKE_CHANNEL], self._on_notify, self._halt, on_reconnect=self._wake.set))
        if not self.options.burst:
            self._start(ReconcilerThread(self._halt, self._count_repairs))
        if self.options.scheduler and not self.options.burst:
            self._start(SchedulerThread(self.options, self._halt))

    def _start_slot(self, index: int) -> None:
        self._start(threading.Thread(target=self._slot_loop, args=(index,), name=f"durable-slot-{index}", daemon=True))

    def _replace_slot(self) -> int:
        """Start a slot thread in place of an abandoned one; returns its index."""
        index = next(self._slot_indexes)
        self._start_slot(index)
        return index

    def _start(self, thread: threading.Thread) -> None:
        thread.start()
        self._threads.append(thread)

    def _count_repairs(self, repairs: list[Repair]) -> None:
        self.stats.repaired += len(repairs)
        if self.metrics is not None and repairs:
            self.metrics.repaired(len(repairs))
        if repairs:
            self._wake.set()  # repaired runs may be claimable now

    def _on_notify(self, channel: str, payload: str) -> None:
        if self.options.queues is None or payload in self.options.queues:
            self._wake.set()

    def _claim_loop(self) -> None:
        poll = durable_settings.POLL_SECONDS
        backoff = 0.1
        next_summary = time.monotonic() + durable_settings.SUMMARY_SECONDS
        while not self._stopping.is_set():
            self._wake.clear()
            timeout = poll * random.uniform(0.95, 1.05)
            try:
                if not self.landings.land():
                    self._stopping.wait(backoff)  # successes are kept until the database answers
                    backoff = min(backoff * 2, 5.0)
                    continue
                self._hand_back_stale_prefetch()
                self.time_limits.keep()
                self._check_abandoned()
                claimed, asked = self._claim()
                faults.reach("worker.claimed")
                # Fewer than asked: nothing more is due now; sleep until the next run is.
                due = lifecycle.seconds_until_next_due(self._bounds) if asked and len(claimed) < asked else None
                backoff = 0.1
            except DatabaseError as exc:
                lifecycle.reset_connection()
                self._on_database(not lifecycle.database_unreachable(exc))
                logger.warning("claim failed (%s); retrying in %.1fs", exc, backoff)
                self._stopping.wait(backoff)
                backoff = min(backoff * 2, 5.0)
                continue
            if self.options.burst and not claimed and self.pool.held_count == 0 and self.landings.empty():
                logger.info("worker %s: nothing claimable now (--burst); exiting", self.options.worker_id)
                return
            if time.monotonic() >= next_summary:
                self.stats.log_summary(running=self.pool.held_count, stuck_threads=self.pool.stuck(0.0))
                next_summary = time.monotonic() + durable_settings.SUMMARY_SECONDS
            if asked and len(claimed) == asked:
                continue  # maybe more is due: claim again once a slot is free
            if due is not None:
                timeout = min(timeout, max(due, 0.005))
            for until in (self.pool.seconds_until_hold_expires(), *self.time_limits.seconds_until_due()):
                if until is not None:
                    timeout = min(timeout, max(until, 0.005))
            self._wake.wait(timeout)

    def _check_abandoned(self) -> None:
        """More stuck threads than --max-abandoned: stop claiming, and exit with EXIT_ABANDONED."""
        stuck = self.time_limits.stuck_threads()
        if stuck <= self.options.max_abandoned or self._stopping.is_set():
            return
        logger.error(
            "worker %s: %d thread(s) are stuck in handlers past their time limit (--max-abandoned %d); "
            "releasing its runs and exiting with status %d",
            self.options.worker_id,
            stuck,
            self.options.max_abandoned,
            EXIT_ABANDONED,
        )
        self.exit_code = EXIT_ABANDONED
        self.request_stop()

    def _claim(self) -> tuple[list[Attempt], int]:
        """Claim for idle slots and, while attempts are short, a batch ahead; returns (claimed, asked)."""
        idle = self.pool.idle_slots()
        ahead = self.pool.prefetch_room()
        if idle == 0 and ahead < max(1, self.options.concurrency // 2):
            return [], 0  # claim ahead in batches, not one run per finished attempt
        claimed = lifecycle.claim(
            limit=idle + ahead, start_now=idle, worker_id=self.options.worker_id, bounds=self._bounds
        )
        self._on_database(True)
        for attempt in claimed:
            run = attempt.run
            logger.info(
                "claimed run %s (%s v%s) attempt %d%s",
                run.run_id,
                run.name,
                run.version,
                attempt.token,
                " (recovered from a dead worker)" if attempt.recovered else "",
                extra=telemetry.log_fields(attempt),
            )
        self.stats.claimed += len(claimed)
        self.pool.add(claimed)
        return claimed, idle + ahead

    def _hand_back_stale_prefetch(self) -> None:
        """Release claimed runs no slot started in time, so an idle worker elsewhere takes them."""
        stale = self.pool.take_prefetched(older_than=PREFETCH_HOLD_SECONDS)
        if stale:
            lifecycle.release(stale)
            self.pool.forget(stale)
            logger.debug("handed back %d claimed run(s) no slot started in time", len(stale))

    # -- slots ---------------------------------------------------------------------

    def _slot_loop(self, slot: int) -> None:
        try:
            while True:
                attempt = self.pool.take(slot)
                if attempt is None:
                    return
                try:
                    self._run_attempt(slot, attempt)
                except BaseException:  # a bug here, even one escaping as control flow, must not kill the slot
                    logger.exception(
                        "run %s: unexpected error in the worker",
                        attempt.run.run_id,
                        extra=telemetry.log_fields(attempt),
                    )
                    self.pool.done(slot, attempt, ran=False)
                # An attempt is the worker's request: the handler's own connections (the engine's are
                # shared apart) are closed or kept as CONN_MAX_AGE says, and go back to OPTIONS["pool"].
                close_old_connections()
                self._wake.set()
                if self.pool.is_abandoned(slot):
                    # Another thread took this slot while the handler overstayed: this one is done.
                    self.pool.returned(slot)
                    logger.info(
                        "run %s: the abandoned thread of slot %d came back and exits",
                        attempt.run.run_id,
                        slot,
                        extra=telemetry.log_fields(attempt),
                    )
                    return
        finally:
            connections.close_all()  # a worker run inside a longer-lived process leaves no session behind

    def _run_attempt(self, slot: int, attempt: Attempt) -> None:
        if not attempt.started and not self._start_prefetched(attempt):
            self.pool.done(slot, attempt, ran=False)
            return
        attempt.begin()
        try:
            outcome = executor.execute(attempt, land_success=self.landings.hand_over)
        except DatabaseError as exc:
            logger.warning(
                "run %s: database error while landing (%s); its lease will expire and it will be recovered",
                attempt.run.run_id,
                exc,
                extra=telemetry.log_fields(attempt),
            )
            lifecycle.reset_connection()
            outcome = Outcome.ERROR
        if outcome == Outcome.LANDING:
            # Held until the claim loop lands it with others.
            self.pool.done(slot, attempt, ran=True, keep=True)
            return
        if not attempt.overstayed:  # otherwise the claim loop counted how its time limit ended it
            self.stats.count(outcome)
        self.pool.done(slot, attempt, ran=True)

    def _start_prefetched(self, attempt: Attempt) -> bool:
        """Start a claimed run that waited for this slot; False (and dropped) if it may not run now."""
        if not self._database_reachable:
            return False
        try:
            return lifecycle.start(attempt)
        except DatabaseError as exc:
            lifecycle.reset_connection()
            self._on_database(not lifecycle.database_unreachable(exc))
            return False

    # -- shutdown ---------------------------------------------------------------------

    def _shutdown(self) -> None:
        self._release(self.pool.take_prefetched(), "claimed run(s) no slot had started")
        deadline = time.monotonic() + self.options.grace
        while self.pool.held_count and time.monotonic() < deadline:
            self.landings.try_landing()
            try:
                self.time_limits.end_overstays()  # time limits still hold while the worker drains
            except DatabaseError:
                lifecycle.reset_connection()
            time.sleep(0.02)
        self.landings.try_landing()
        left = self.pool.held()
        for attempt in left:
            attempt.stop(lost=True)
        self._release(left, "run(s) still running after the grace period")
        self._halt.set()
        self.pool.close()
        self._record_presence(lambda identity: lifecycle.worker_stopped(identity.worker_id), "mark itself stopped")
        if self.metrics is not None:
            telemetry.stop_observing(self.metrics)
            self.metrics.close()
        self.stats.log_summary(running=self.pool.held_count, stuck_threads=self.pool.stuck(0.0))
        logger.info("worker %s stopped", self.options.worker_id)

    def _release(self, attempts: list[Attempt], what: str) -> None:
        if not attempts:
            return
        try:
            released = lifecycle.release(attempts)
            logger.info("released %d %s", released, what)
        except DatabaseError as exc:
            logger.warning("could not release %d %s (%s); their leases will expire", len(attempts), what, exc)
        self.pool.forget(attempts)
