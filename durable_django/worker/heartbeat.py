"""The heartbeat thread: renews every held lease in one statement, and carries cancel requests back.

A run that is no longer this worker's stops its attempt. A renewal that fails
is tried again soon (after 0.1 s, doubling up to the usual beat), so that a
database restart costs no lease: two restarts a second apart used to fail two
regular beats in a row. When renewals keep failing for two thirds of a lease,
every lease is treated as lost: another worker may take the runs over once
they expire, so this one must write nothing more. Nothing the thread meets may
end it: an unexpected error is logged and the next beat comes as usual.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from django.db import connections

from .. import faults
from ..conf import durable_settings
from ..engine import lifecycle, telemetry
from ..engine.attempt import Attempt
from .recovery import Recovering
from .slots import SlotPool

logger = logging.getLogger("durable_django.worker")

# Seconds before a failed renewal is tried again; doubled after each failure, up to the usual beat.
FIRST_RETRY_SECONDS = 0.1


class Heartbeat(threading.Thread):
    """Renews the leases of the pool's attempts every ``heartbeat_seconds`` until ``halt`` is set.

    Args:
        pool: the worker's held attempts.
        halt: set when the worker shuts down.
        on_database: told whether the database answered (True) or could not be reached (False).
        on_beat: called after every beat's renewal (the worker records that it is alive).
    """

    def __init__(
        self,
        pool: SlotPool,
        halt: threading.Event,
        on_database: Callable[[bool], None],
        *,
        on_beat: Callable[[], None] | None = None,
    ):
        super().__init__(name="durable-heartbeat", daemon=True)
        self.pool = pool
        self.halt = halt
        self.on_database = on_database
        self.on_beat = on_beat
        self._last_renewal = time.monotonic()

    def run(self) -> None:
        try:
            failures = 0
            while not self.halt.wait(self.pause_after(failures)):
                try:
                    failures = 0 if self.beat() else failures + 1
                except Exception:  # the heartbeat must outlive any bug in one beat
                    logger.exception("heartbeat: unexpected error; carrying on")
        finally:
            connections.close_all()

    @staticmethod
    def pause_after(failures: int) -> float:
        """Seconds until the next beat, after ``failures`` renewals in a row that the database refused."""
        beat: float = durable_settings.heartbeat_seconds
        return min(FIRST_RETRY_SECONDS * 2 ** (failures - 1), beat) if failures else beat

    def beat(self) -> bool:
        """Renew once, act on what the renewal says of each held run, then tell the worker it beat.

        Returns:
            False when the database refused the renewal.
        """
        try:
            return self._renew()
        finally:
            if self.on_beat is not None:
                with Recovering():  # the renewal tells whether the database answers
                    self.on_beat()

    def _renew(self) -> bool:
        attempts = self.pool.held()
        if not attempts:
            self._last_renewal = time.monotonic()
            return True
        with Recovering() as failure:
            faults.reach("heartbeat.renew")
            renewals = lifecycle.renew(attempts)
        if failure.error is not None:
            self.on_database(not failure.unreachable)
            if time.monotonic() - self._last_renewal > durable_settings.LEASE_SECONDS * 2 / 3:
                logger.warning("heartbeat failing for 2/3 of a lease (%s): treating leases as lost", failure.error)
                for attempt in attempts:
                    attempt.stop(lost=True)
            return False
        self._last_renewal = time.monotonic()
        self.on_database(True)
        gone = []
        for attempt in attempts:
            renewal = renewals.get(attempt.held)
            if renewal is None or not renewal.held:
                gone.append(attempt)
            elif renewal.cancel_requested and attempt.begin_cancel():
                self._cancel(attempt)
        for attempt in gone:
            if attempt.started:
                logger.warning(
                    "run %s: lease lost; stopping its attempt", attempt.run.run_id, extra=telemetry.log_fields(attempt)
                )
            attempt.stop(lost=True)
        # Prefetched runs that are no longer ours (cancelled while they waited) are simply dropped.
        self.pool.forget([attempt for attempt in gone if not attempt.started])
        return True

    def _cancel(self, attempt: Attempt) -> None:
        with Recovering() as failure:
            landed = lifecycle.cancel_held(attempt)
        if failure.error is not None:
            return
        if landed:  # and its attempt stopped
            logger.info(
                "run %s cancelled at heartbeat; stopping its attempt",
                attempt.run.run_id,
                extra=telemetry.log_fields(attempt, "cancelled"),
            )
