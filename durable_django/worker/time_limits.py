"""Time limits as the claim loop keeps them: deadlines, attempt timeouts, and threads that never come back.

The claim loop fails the live runs whose deadline has passed (any run: whatever
this worker's bounds, it is a worker that sees them) at least every
``deadline_sweep_seconds()`` and at the soonest deadline it knows. It ends an
attempt that overstays its function's timeout or its run's deadline: the
handler is stopped (an async one cancelled), the attempt landed (failed,
retried per the policy for a timeout), and a sync handler that does not come
back has its thread abandoned and its slot given to a new thread. More than
``--max-abandoned`` threads still stuck: the worker stops claiming, lets its
other attempts finish within the grace period, releases the rest and exits
with ``EXIT_ABANDONED``, for its supervisor to start a fresh one.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from django.utils.translation import ngettext

from ..conf import durable_settings
from ..engine import time_limits
from .slots import SlotPool
from .stats import Stats

logger = logging.getLogger("durable_django.worker")

# The exit status of a worker that abandoned more stuck threads than --max-abandoned allows.
EXIT_ABANDONED = 3
# An abandoned thread counts as stuck once it has not come back this long after its attempt was stopped
# (a handler interrupted in Python code, or an async one cancelled, comes back within milliseconds).
ABANDON_SETTLE_SECONDS = 1.0


def deadline_sweep_seconds() -> float:
    """How often, at most, a worker looks for runs past their deadline that it did not know of."""
    return min(durable_settings.POLL_SECONDS, 5.0) / 2


class TimeLimitKeeper:
    """The claim loop's time limits over one worker's slots.

    Args:
        pool: the worker's held attempts.
        stats: where the runs it fails and the attempts it ends are counted.
        replace_slot: starts a new slot thread in place of an abandoned one; returns its index.
    """

    def __init__(self, pool: SlotPool, stats: Stats, *, replace_slot: Callable[[], int]) -> None:
        self._pool = pool
        self._stats = stats
        self._replace_slot = replace_slot
        # When to look for runs past their deadline next (monotonic).
        self._next_sweep = 0.0

    def keep(self) -> None:
        """End the attempts past their time limit, and fail the runs past their deadline when it is time."""
        self.end_overstays()
        if time.monotonic() >= self._next_sweep:
            self._sweep_deadlines()

    def end_overstays(self) -> None:
        """End the attempts a time limit has stopped: their slots go to new threads if theirs are stuck."""
        now = time.monotonic()
        for slot, attempt in self._pool.overstayed(now):
            error = time_limits.stop_overstay(attempt, now)
            if error is None:
                continue  # its handler returned meanwhile: its own landing stands
            if self._pool.abandon(slot, attempt):
                index = self._replace_slot()
                logger.warning(
                    "run %s: the thread of slot %d is stuck in attempt %d; slot %d takes its place",
                    attempt.run.run_id,
                    slot,
                    attempt.token,
                    index,
                )
            self._stats.count(time_limits.land_overstay(attempt, error))

    def past_max_abandoned(self, max_abandoned: int, worker_id: str) -> bool:
        """More abandoned threads than ``max_abandoned`` have not come back within ``ABANDON_SETTLE_SECONDS``:
        logged, for the worker to release its runs and exit with ``EXIT_ABANDONED``."""
        stuck = self._pool.stuck(ABANDON_SETTLE_SECONDS)
        if stuck <= max_abandoned:
            return False
        logger.error(
            ngettext(
                "worker %(worker_id)s: %(count)d thread is stuck in a handler past its time limit "
                "(--max-abandoned %(max)d); releasing its runs and exiting with status %(status)d",
                "worker %(worker_id)s: %(count)d threads are stuck in handlers past their time limit "
                "(--max-abandoned %(max)d); releasing its runs and exiting with status %(status)d",
                stuck,
            ),
            {"worker_id": worker_id, "count": stuck, "max": max_abandoned, "status": EXIT_ABANDONED},
        )
        return True

    def seconds_until_due(self) -> list[float | None]:
        """When each kind of time limit next needs the claim loop (None: not pending)."""
        return [
            self._pool.seconds_until_overstay(),
            self._pool.seconds_until_settled(ABANDON_SETTLE_SECONDS),
            self._next_sweep - time.monotonic(),
        ]

    def _sweep_deadlines(self) -> None:
        """Fail the live runs whose deadline has passed; look again at the soonest deadline, or soon."""
        found = time_limits.expire_past_deadlines()
        self._stats.expired += found
        interval = deadline_sweep_seconds()
        if found >= time_limits.SWEEP_BATCH:
            interval = 0.0  # there may be more: straight on at the next turn
        else:
            until = time_limits.seconds_until_next_deadline()
            if until is not None:
                interval = min(interval, until + 0.001)
        self._next_sweep = time.monotonic() + interval
