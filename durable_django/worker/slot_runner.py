"""What a slot thread of ``manage.py durable_worker`` does with each attempt its slot is given.

It executes each attempt the claim loop claimed for it, and sees it landed. A claim starts every run it
takes for a slot, except one a flow-control admission took beyond the slots: the slot starts that one
with a fenced write first, unless the database cannot be reached. Whatever escapes, the slot lives on
and the attempt is accounted for (landed failed, or left to its lease when the database is gone).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from django.db import close_old_connections, connections

from ..engine import execute as executor
from ..engine import lifecycle, telemetry
from ..engine.attempt import Attempt
from ..engine.attempt_state import Outcome
from .landings import PendingLandings
from .recovery import Recovering
from .slots import SlotPool
from .stats import Stats

logger = logging.getLogger("durable_django.worker")


class SlotRunner:
    """The body of every slot thread of one worker.

    Args:
        pool: the worker's slots, which hand each thread its next attempt.
        stats: where outcomes are counted.
        landings: the successes the claim loop lands together.
        wake: wakes the claim loop (a slot came free, or an attempt with a timeout began).
        database_reachable: whether the database answered last; a claimed run is not started while it does not.
        on_database: told whether the database answered a start.
    """

    def __init__(
        self,
        pool: SlotPool,
        stats: Stats,
        landings: PendingLandings,
        *,
        wake: Callable[[], None],
        database_reachable: Callable[[], bool],
        on_database: Callable[[bool], None],
    ) -> None:
        self._pool = pool
        self._stats = stats
        self._landings = landings
        self._wake = wake
        self._database_reachable = database_reachable
        self._on_database = on_database

    def run(self, slot: int) -> None:
        """The slot thread's body: attempt after attempt until the pool closes or the slot was given away."""
        try:
            while True:
                attempt = self._pool.take(slot)
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
                    self._pool.done(slot, attempt)
                # An attempt is the worker's request: the handler's own connections (the engine's are
                # shared apart) are closed or kept as CONN_MAX_AGE says, and go back to OPTIONS["pool"].
                close_old_connections()
                self._wake()
                if self._pool.is_abandoned(slot):
                    # Another thread took this slot while the handler overstayed: this one is done.
                    self._pool.returned(slot)
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
        if not attempt.started and not self._start_claimed(attempt):
            self._pool.done(slot, attempt)
            return
        attempt.begin()
        if attempt.timeout is not None:
            self._wake()  # the claim loop may be asleep past this attempt's timeout: it must end it on time
        try:
            outcome = executor.execute(attempt, land_success=self._landings.hand_over)
        except Exception as exc:  # noqa: BLE001 - whatever escapes a landing, the attempt is landed
            outcome = self._land_escaped(attempt, exc)
        if outcome is None:
            # Handed over: held until the claim loop lands it with others and ends it.
            self._pool.done(slot, attempt, keep=True)
            return
        if not attempt.overstayed:  # otherwise the claim loop counted how its time limit ended it
            self._stats.count(outcome)
        self._pool.done(slot, attempt)

    def _land_escaped(self, attempt: Attempt, exc: Exception) -> Outcome:
        """An error escaped the attempt's landing: land it failed with that error, unless the database is
        gone (then its lease expires and it is recovered) or the attempt had overstayed (the claim loop
        landed it)."""
        lifecycle.reset_connection()
        if lifecycle.database_unreachable(exc) or attempt.overstayed:
            logger.warning(
                "run %s: database error while landing (%s); its lease will expire and it will be recovered",
                attempt.run.run_id,
                exc,
                extra=telemetry.log_fields(attempt),
            )
            return Outcome.ERROR
        logger.warning(
            "run %s: %s escaped its landing (%s); landing the attempt failed with it",
            attempt.run.run_id,
            type(exc).__name__,
            exc,
            extra=telemetry.log_fields(attempt),
        )
        try:
            return lifecycle.land_failed(attempt, exc)
        except Exception as again:  # noqa: BLE001 - the database is gone too: the lease decides
            logger.warning(
                "run %s: could not land the attempt failed either (%s); its lease will expire",
                attempt.run.run_id,
                again,
                extra=telemetry.log_fields(attempt),
            )
            lifecycle.reset_connection()
            return Outcome.ERROR

    def _start_claimed(self, attempt: Attempt) -> bool:
        """Start a claimed run its claim did not start; False (and dropped) if it may not run now."""
        if not self._database_reachable():
            return False
        with Recovering() as failure:
            return lifecycle.start(attempt)
        self._on_database(not failure.unreachable)
        return False
