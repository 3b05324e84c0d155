"""The attempts a worker holds, and how its slots take them.

A claim hands over runs that start at once (one per idle slot) and, while
attempts are short, a batch more that wait for a slot: they are claimed but
not started, so a slot that frees starts one with a single fenced write
instead of waiting for the next claim. Holding runs back from idle workers
elsewhere is the price of that, so it is kept small: the prefetch is only
taken while recent attempts are short and no slot is stuck on a long one, and
a prefetched run no slot started within ``PREFETCH_HOLD_SECONDS`` is handed back.

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

# Prefetch only while attempts take less than this on average, and no slot has been busy longer.
PREFETCH_BELOW_SECONDS = 0.05
# A prefetched run no slot started within this long is handed back for an idle worker to take.
PREFETCH_HOLD_SECONDS = 0.25
# Weight of the latest attempt in the running average of attempt durations.
DURATION_WEIGHT = 0.2


class SlotPool:
    """Held attempts, the queues slots take them from, and what tells the claim loop how much to claim."""

    def __init__(self, concurrency: int) -> None:
        self.concurrency = concurrency
        self._lock = threading.Condition()
        self._held: dict[tuple[str, int], Attempt] = {}
        self._ready: collections.deque[Attempt] = collections.deque()
        # (attempt, when it was claimed): claimed runs not started, oldest first.
        self._prefetched: collections.deque[tuple[Attempt, float]] = collections.deque()
        # slot index -> when its current attempt started.
        self._busy_since: dict[int, float] = {}
        self._average_duration: float | None = None
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
            return len(self._busy_since)

    def idle_slots(self) -> int:
        """Slots that would start a run now: neither busy nor about to take a started one."""
        with self._lock:
            return max(self.concurrency - len(self._busy_since) - len(self._ready), 0)

    def prefetch_room(self) -> int:
        """How many more runs to claim ahead of the slots (0 unless attempts are short)."""
        with self._lock:
            now = time.monotonic()
            short = self._average_duration is not None and self._average_duration < PREFETCH_BELOW_SECONDS
            stuck = any(now - since >= PREFETCH_HOLD_SECONDS for since in self._busy_since.values())
            if not short or stuck:
                return 0
            return max(self.concurrency - len(self._prefetched), 0)

    def seconds_until_hold_expires(self) -> float | None:
        with self._lock:
            if not self._prefetched:
                return None
            return max(self._prefetched[0][1] + PREFETCH_HOLD_SECONDS - time.monotonic(), 0.0)

    # -- handing attempts over ------------------------------------------------

    def add(self, attempts: list[Attempt]) -> None:
        """Hold newly claimed attempts: started ones for idle slots, the rest prefetched."""
        now = time.monotonic()
        with self._lock:
            for attempt in attempts:
                self._held[attempt.held] = attempt
                if attempt.started:
                    self._ready.append(attempt)
                else:
                    self._prefetched.append((attempt, now))
            # One waiting slot per attempt: waking every slot for each claim cost the GIL as much as the
            # claim's own Python (a woken slot that finds nothing left goes back to wait).
            self._lock.notify(len(attempts))

    def take(self, slot: int) -> Attempt | None:
        """Block until there is an attempt for this slot (started first); None once the pool is closed."""
        with self._lock:
            while not self._closed:
                if self._ready:
                    attempt = self._ready.popleft()
                elif self._prefetched:
                    attempt = self._prefetched.popleft()[0]
                else:
                    self._lock.wait()
                    continue
                self._busy_since[slot] = time.monotonic()
                self._running[slot] = attempt
                return attempt
            return None

    def done(self, slot: int, attempt: Attempt, *, ran: bool, keep: bool = False) -> None:
        """A slot is through with an attempt; ``keep`` holds it on until its batched landing."""
        with self._lock:
            self._running.pop(slot, None)
            started = self._busy_since.pop(slot, None)
            if ran and started is not None:
                duration = time.monotonic() - started
                self._average_duration = (
                    duration
                    if self._average_duration is None
                    else (DURATION_WEIGHT * duration + (1 - DURATION_WEIGHT) * self._average_duration)
                )
            if not keep:
                self._held.pop(attempt.held, None)

    def forget(self, attempts: Collection[Attempt]) -> None:
        """Stop holding attempts (landed, released, or no longer this worker's)."""
        with self._lock:
            for attempt in attempts:
                self._held.pop(attempt.held, None)
            gone = {attempt.held for attempt in attempts}
            self._prefetched = collections.deque(item for item in self._prefetched if item[0].held not in gone)

    def take_prefetched(self, *, older_than: float | None = None) -> list[Attempt]:
        """Remove prefetched attempts from the queue (all, or those held longer than ``older_than`` seconds).

        Taken under the lock, so no slot can start one of them afterwards.
        """
        with self._lock:
            limit = None if older_than is None else time.monotonic() - older_than
            taken = [attempt for attempt, since in self._prefetched if limit is None or since <= limit]
            kept = [(attempt, since) for attempt, since in self._prefetched if not (limit is None or since <= limit)]
            self._prefetched = collections.deque(kept)
            return taken

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
            self._busy_since.pop(slot, None)
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
