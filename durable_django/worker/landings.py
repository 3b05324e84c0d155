"""Successful attempts waiting for the claim loop, which lands them together in one statement.

A slot whose handler returned hands its attempt over and takes the next one; the
claim loop lands every waiting success at its next turn. What the database
cannot take now stays queued (the attempt stays held, its lease renewed) and is
landed once the database answers: a step's result is never run twice for want
of a connection.
"""

from __future__ import annotations

import queue
from collections.abc import Callable

from ..engine import lifecycle
from ..engine.attempt import Attempt
from .recovery import Recovering
from .slots import SlotPool
from .stats import Stats


class PendingLandings:
    """The successes slots handed over, landed in batches.

    Args:
        pool: the worker's held attempts (a landed one is no longer held).
        stats: where each landing's outcome is counted.
        on_database: told False when the database could not take a batch.
        wake: wakes the claim loop to land what was handed over.
    """

    def __init__(
        self, pool: SlotPool, stats: Stats, *, on_database: Callable[[bool], None], wake: Callable[[], None]
    ) -> None:
        self._pool = pool
        self._stats = stats
        self._on_database = on_database
        self._wake = wake
        # (attempt, output JSON)
        self._queue: queue.Queue[tuple[Attempt, str]] = queue.Queue()

    def empty(self) -> bool:
        return self._queue.empty()

    def hand_over(self, attempt: Attempt, output: str) -> None:
        """A slot's successful attempt, for the claim loop to land with others and end (``land_success`` of
        execute: it has not ended yet)."""
        attempt.hand_over()
        self._queue.put((attempt, output))
        self._wake()

    def land(self) -> bool:
        """Land every waiting success together and stop holding them.

        Returns:
            False when some must wait: the database could not be reached (they stay queued).
        """
        batch = []
        while True:
            try:
                batch.append(self._queue.get_nowait())
            except queue.Empty:
                break
        if not batch:
            return True
        report = lifecycle.land_successes(batch)
        for item in report.retry:
            self._queue.put(item)
        for outcome in report.outcomes.values():  # the attempts it ended
            self._stats.count(outcome)
        self._pool.forget(list(report.outcomes))
        if report.retry:
            self._on_database(False)
            return False
        return True

    def try_landing(self) -> None:
        """Land what can be landed now; what cannot stays queued for the next try."""
        with Recovering():
            self.land()
