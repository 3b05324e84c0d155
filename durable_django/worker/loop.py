"""The claim loop of ``manage.py durable_worker``.

One thread claims in batches to fill idle slots (and, while attempts are
short, a batch ahead of them) and sleeps on an event that a NOTIFY, a
finished attempt or the poll timeout sets. Slot threads execute attempts
(``worker/slot_runner.py``). The
heartbeat thread renews leases, the listener thread hears NOTIFY (behind a
transaction pooler only through ``LISTEN_DATABASE``; without one the poll
wakes the loop), the scheduler thread fires cron schedules. The engine's reads
and writes, from every thread, share a few connections
(``DURABLE["ENGINE_CONNECTIONS"]``, see ``engine/lifecycle.py``); the listener
keeps a session of its own, and a handler's own queries use its slot thread's
connection. A broken connection is replaced (``worker/recovery.py``); no thread
may die of an error.

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

from django.utils.translation import gettext, ngettext

from .. import faults
from ..conf import durable_settings
from ..engine import lifecycle, telemetry
from ..engine.attempt import Attempt
from ..engine.log_words import past_grace_words, runnable_words
from ..engine.reconciler import Repair
from .claiming import Claimer
from .heartbeat import Heartbeat
from .landings import PendingLandings
from .listener import Listener
from .reconciler import ReconcilerThread
from .recovery import Recovering
from .scheduler import SchedulerThread
from .slot_runner import SlotRunner
from .slots import SlotPool
from .stats import Stats
from .time_limits import EXIT_ABANDONED, TimeLimitKeeper

if TYPE_CHECKING:
    from .metrics import WorkerMetrics

logger = logging.getLogger("durable_django.worker")

# After a failed claim pass, the loop waits this long before the next, doubling up to the most.
FIRST_BACKOFF_SECONDS = 0.1
MAX_BACKOFF_SECONDS = 5.0


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
        self.claimer = Claimer(
            self.pool,
            worker_id=options.worker_id,
            bounds=self._bounds,
            stats=self.stats,
            on_database=self._on_database,
        )
        self.slots = SlotRunner(
            self.pool,
            self.stats,
            self.landings,
            wake=self._wake.set,
            database_reachable=lambda: self._database_reachable,
            on_database=self._on_database,
        )
        # The process's exit status once run() returns: EXIT_ABANDONED after too many stuck threads.
        self.exit_code = 0

    # -- control --------------------------------------------------------------

    def request_stop(self) -> None:
        """Graceful stop: claim nothing more, let attempts finish within the grace period."""
        if not self._stopping.is_set():
            held = self.pool.held_count
            logger.info(
                ngettext(
                    "worker %(worker_id)s stopping: finishing %(count)d attempt within %(grace).0fs",
                    "worker %(worker_id)s stopping: finishing %(count)d attempts within %(grace).0fs",
                    held,
                ),
                {"worker_id": self.options.worker_id, "count": held, "grace": self.options.grace},
            )
        self._stopping.set()
        self._wake.set()

    def _on_database(self, reachable: bool) -> None:
        """Note whether the database answers, and say so when that changes (slots start no claimed run
        meanwhile)."""
        if reachable == self._database_reachable:
            return
        self._database_reachable = reachable
        if reachable:
            logger.info("worker %s: the database answers again", self.options.worker_id)
            self._wake.set()
            return
        logger.warning(
            gettext("worker %(worker_id)s: the database cannot be reached; claiming nothing until it answers"),
            {"worker_id": self.options.worker_id},
        )

    # -- main loop ---------------------------------------------------------------

    def run(self) -> None:
        opts = self.options
        logger.info(
            gettext(
                "worker %(worker_id)s starting: concurrency %(concurrency)d, queues %(queues)s, tenant %(tenant)s; "
                "runs %(runnable)s"
            ),
            {
                "worker_id": opts.worker_id,
                "concurrency": opts.concurrency,
                "queues": ",".join(opts.queues or ["*"]),
                "tenant": opts.tenant_id or "*",
                "runnable": runnable_words(opts.functions),
            },
        )
        if self.metrics is not None:
            self.metrics.track(self.pool)
            telemetry.observe(self.metrics)
        with lifecycle.engine_connections(opts.worker_id):
            self._record_presence(lifecycle.worker_started, "record itself")
            logger.info("worker %s: paused: %s", opts.worker_id, self._paused())
            self._start_threads()
            try:
                self._claim_loop()
            finally:
                self._shutdown()

    def _paused(self) -> str:
        """What is paused now, for the log; a database that cannot say leaves the log line uninformed, no more."""
        with Recovering() as failure:
            return lifecycle.paused_summary()
        return f"unknown ({failure.error})"

    def _record_presence(self, write: Callable[[lifecycle.WorkerIdentity], None], what: str) -> None:
        """Write this worker's row; a database that cannot take it now only delays the workers page."""
        with Recovering() as failure:
            write(self.identity)
        if failure.error is not None:
            logger.warning("worker %s could not %s in durable_worker (%s)", self.options.worker_id, what, failure.error)

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
        self._start(threading.Thread(target=self.slots.run, args=(index,), name=f"durable-slot-{index}", daemon=True))

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
        """Pass after pass until stopped: land, keep time limits, claim, then sleep until something is due."""
        backoff = FIRST_BACKOFF_SECONDS
        next_summary = time.monotonic() + durable_settings.SUMMARY_SECONDS
        while not self._stopping.is_set():
            self._wake.clear()
            passed = None
            with Recovering() as failure:
                passed = self._claim_pass()
            if failure.error is not None:
                self._on_database(not failure.unreachable)
                logger.warning("claim failed (%s); retrying in %.1fs", failure.error, backoff)
            if passed is None:  # the landings or the claim met a database that cannot take them now
                self._stopping.wait(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF_SECONDS)
                continue
            backoff = FIRST_BACKOFF_SECONDS
            claimed, asked, due = passed
            if self.options.burst and not claimed and self.pool.held_count == 0 and self.landings.empty():
                logger.info("worker %s: nothing claimable now (--burst); exiting", self.options.worker_id)
                return
            next_summary = self._log_summary_when_due(next_summary)
            if asked and len(claimed) == asked:
                continue  # maybe more is due: claim again once a slot is free
            self._wake.wait(self._seconds_to_sleep(due))

    def _claim_pass(self) -> tuple[list[Attempt], int, float | None] | None:
        """Land what waits, keep the time limits, then claim.

        Returns:
            (the attempts claimed, how many were asked for, the seconds until the next run is due when fewer
            than asked were), or None when the landings wait for the database (successes are kept until it
            answers).
        """
        if not self.landings.land():
            return None
        self.time_limits.keep()
        self._check_abandoned()
        claimed, asked = self.claimer.claim()
        faults.reach("worker.claimed")
        # Fewer than asked: nothing more is due now; sleep until the next run is.
        due = lifecycle.seconds_until_next_due(self._bounds) if asked and len(claimed) < asked else None
        return claimed, asked, due

    def _seconds_to_sleep(self, due: float | None) -> float:
        """The poll interval (jittered, so workers started together spread out), or less: until the next due
        run or the next time limit, whichever comes first."""
        timeout = durable_settings.POLL_SECONDS * random.uniform(0.95, 1.05)
        for until in (due, *self.time_limits.seconds_until_due()):
            if until is not None:
                timeout = min(timeout, max(until, 0.005))
        return timeout

    def _log_summary_when_due(self, next_summary: float) -> float:
        """Log the periodic summary once its time has come; returns when the next one is due."""
        if time.monotonic() < next_summary:
            return next_summary
        self.stats.log_summary(running=self.pool.held_count, stuck_threads=self.pool.stuck(0.0), paused=self._paused())
        return time.monotonic() + durable_settings.SUMMARY_SECONDS

    def _check_abandoned(self) -> None:
        """More stuck threads than --max-abandoned: stop claiming, and exit with EXIT_ABANDONED."""
        if self._stopping.is_set() or not self.time_limits.past_max_abandoned(
            self.options.max_abandoned, self.options.worker_id
        ):
            return
        self.exit_code = EXIT_ABANDONED
        self.request_stop()

    # -- shutdown ---------------------------------------------------------------------

    def _shutdown(self) -> None:
        deadline = time.monotonic() + self.options.grace
        while self.pool.held_count and time.monotonic() < deadline:
            self.landings.try_landing()
            with Recovering():
                self.time_limits.end_overstays()  # time limits still hold while the worker drains
            time.sleep(0.02)
        self.landings.try_landing()
        left = self.pool.held()
        for attempt in left:
            attempt.stop(lost=True)
        self._release(left, past_grace_words)
        self._halt.set()
        self.pool.close()
        self._record_presence(lambda identity: lifecycle.worker_stopped(identity.worker_id), "mark itself stopped")
        if self.metrics is not None:
            telemetry.stop_observing(self.metrics)
            self.metrics.close()
        self.stats.log_summary(running=self.pool.held_count, stuck_threads=self.pool.stuck(0.0), paused=self._paused())
        logger.info("worker %s stopped", self.options.worker_id)

    def _release(self, attempts: list[Attempt], runs: Callable[[int], str]) -> None:
        """Hand ``attempts`` back; ``runs(count)`` says which runs they are, for the log."""
        if not attempts:
            return
        with Recovering() as failure:
            released = lifecycle.release(attempts)
            logger.info(gettext("released %(runs)s"), {"runs": runs(released)})
        if failure.error is not None:
            logger.warning(
                gettext("could not release %(runs)s (%(error)s); their leases will expire"),
                {"runs": runs(len(attempts)), "error": failure.error},
            )
        self.pool.forget(attempts)
