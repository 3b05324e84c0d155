"""The attempts a worker holds, and how its slots take them.

A claim takes one run per idle slot, and starts each in the claim statement
(a flow-control admission may take a run it does not start: the slot that
takes it starts it first, ``worker/slot_runner.py``). Claiming a batch ahead of the slots
(runs claimed but not started, each started by a fenced write when a slot
took it) cost a third write per run on the slot's critical path and ran
slower than waiting for the next claim, with short attempts too
(docs/performance.md), so a worker no longer claims ahead.

Every held attempt is keyed by (run id, fence token): a worker that reclaims
its own expired run holds two attempts of it, and each is told apart.

A slot whose attempt overstays its time limit is abandoned: the attempt is no
longer held (the worker lands it), the slot counts as free, and a new thread
takes its place; the old thread exits when its handler returns, if ever. The
pool counts those threads still stuck.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Collection

from ..engine.attempt import Attempt


class SlotPool:
    """Held attempts, the queues slots take them from, and what tells the claim loop how much to claim."""

    def __init__(self, concurrency: int) -> None:
        self.concurrency = concurrency
        self._lock = threading.Condition()
        self._held: dict[tuple[str, int], Attempt] = {}
        # Claimed and started, for the next idle slot to take.
        self._ready: collections.deque[Attempt] = collections.deque()
        # The slots running an attempt now.
        self._busy: set[int] = set()
        self._closed = False
        # slot index -> the attempt its thread executes.
        self._running: dict[int, Attempt] = {}
        # slot index -> when its thread was abandoned, for threads whose handler has not returned.
        self._abandoned: dict[int, float] = {}

    # -- what the claim loop reads ------------------------------------------

    @property
    def held_count(self) -> int:
        with self._lock:
            return len(self._held)

    def held(self) -> list[Attempt]:
        with self._lock:
            return list(self._held.values())

    def busy_slots(self) -> int:
        """Slots running an attempt now."""
        with self._lock:
            return len(self._busy)

    def idle_slots(self) -> int:
        """Slots that would start a run now: neither busy nor about to take a started one."""
        with self._lock:
            return max(self.concurrency - len(self._busy) - len(self._ready), 0)

    # -- handing attempts over ------------------------------------------------

    def add(self, attempts: list[Attempt]) -> None:
        """Hold newly claimed attempts, each started by its claim, for the idle slots."""
        with self._lock:
            for attempt in attempts:
                self._held[attempt.held] = attempt
                self._ready.append(attempt)
            # One waiting slot per attempt: waking every slot for each claim cost the GIL as much as the
            # claim's own Python (a woken slot that finds nothing left goes back to wait).
            self._lock.notify(len(attempts))

    def take(self, slot: int) -> Attempt | None:
        """Block until there is an attempt for this slot; None once the pool is closed."""
        with self._lock:
            while not self._closed:
                if not self._ready:
                    self._lock.wait()
                    continue
                attempt = self._ready.popleft()
                self._busy.add(slot)
                self._running[slot] = attempt
                return attempt
            return None

    def done(self, slot: int, attempt: Attempt, *, keep: bool = False) -> None:
        """A slot is through with an attempt; ``keep`` holds it on until its batched landing."""
        with self._lock:
            self._running.pop(slot, None)
            self._busy.discard(slot)
            if not keep:
                self._held.pop(attempt.held, None)

    def forget(self, attempts: Collection[Attempt]) -> None:
        """Stop holding attempts (landed, released, or no longer this worker's)."""
        with self._lock:
            for attempt in attempts:
                self._held.pop(attempt.held, None)

    # -- time limits ------------------------------------------------------------

    def overstayed(self, now: float) -> list[tuple[int, Attempt]]:
        """(slot, attempt) of the executing attempts a time limit has ended by ``now`` (monotonic)."""
        with self._lock:
            return [
                (slot, attempt)
                for slot, attempt in self._running.items()
                if not attempt.overstayed and (at := attempt.overstay_at()) is not None and at <= now
            ]

    def seconds_until_overstay(self) -> float | None:
        """Until the first executing attempt reaches a time limit, if any has one."""
        with self._lock:
            limits = [at for attempt in self._running.values() if (at := attempt.overstay_at()) is not None]
        return None if not limits else max(min(limits) - time.monotonic(), 0.0)

    def abandon(self, slot: int, attempt: Attempt) -> bool:
        """Give up the thread of ``slot``, stuck in ``attempt``: the slot is free and the attempt no longer held.

        Returns:
            False if the slot's thread had already come back from that attempt (nothing is abandoned).
        """
        with self._lock:
            self._held.pop(attempt.held, None)
            if self._running.get(slot) is not attempt:
                return False
            del self._running[slot]
            self._busy.discard(slot)
            self._abandoned[slot] = time.monotonic()
            self._lock.notify_all()
            return True

    def is_abandoned(self, slot: int) -> bool:
        with self._lock:
            return slot in self._abandoned

    def returned(self, slot: int) -> None:
        """The abandoned thread of ``slot`` came back from its handler: it no longer counts as stuck."""
        with self._lock:
            self._abandoned.pop(slot, None)

    def stuck(self, settle: float) -> int:
        """Abandoned threads still stuck ``settle`` seconds or more after they were abandoned."""
        with self._lock:
            limit = time.monotonic() - settle
            return sum(1 for since in self._abandoned.values() if since <= limit)

    def seconds_until_settled(self, settle: float) -> float | None:
        """Until the next abandoned thread has been stuck for ``settle`` seconds, if one is about to."""
        with self._lock:
            now = time.monotonic()
            waits = [since + settle - now for since in self._abandoned.values() if since + settle > now]
        return min(waits) if waits else None

    def close(self) -> None:
        """Wake every slot to exit."""
        with self._lock:
            self._closed = True
            self._lock.notify_all()
