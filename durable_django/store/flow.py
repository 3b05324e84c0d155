"""Flow control in SQL: admitting limited runs, holding back the others, and releasing them.

The decisions run in two PL/pgSQL functions (migration 0006), one round trip
each: ``durable_admit``, called from the claim statement (store/claims.py) with
the candidates a limit applies to, and ``durable_release_held``, called where a
run gives up a slot. A limit's key is serialised by a transaction-level advisory
lock, taken in one order (by its hash) by both; a VOLATILE function takes a
fresh snapshot for each query, so usage is counted after the locks, from the
runs themselves (no counter can drift): a function key's holders through a
partial index of exactly the runs holding its slots, a queue's through the
running runs, a rate key's starts in ``durable_rate_start``. A held run has
``held_by`` set and is out of the claim index, so no claim scans it; a freed
slot releases the first run held by its key. What a key holds and runs is read
in ``limit_states``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db.backends.utils import CursorWrapper

from ..flow_control import configured_queue_limits, queue_concurrency_reason
from ..states import RunStatus
from .db import WAKE_CHANNEL

# A rate's window is counted this much longer than declared: an attempt's handler starts a few
# milliseconds after its claim commits, and that jitter must not let N+1 handlers start within one window.
RATE_WINDOW_GUARD = 1.02

# Due runs of a saturated function key held at once, per claim (bounds one statement's work).
HOLD_BATCH = 10_000

# Release the first runs each freed key holds, under the keys' locks, and wake the queues' workers.
RELEASE_HELD = "SELECT durable_release_held(%(reasons)s::text[], %(counts)s::int[], %(channel)s::text)"

@dataclass(frozen=True, slots=True)
class SlotChange:
    """A run's status change, with what decides which limit slots it held before and after."""

    concurrency_key: str | None
    while_waiting: bool
    started: bool
    queue: str
    before: str
    after: str

    def freed(self, concurrency_queues: set[str]) -> list[str]:
        """The slot keys this change gave up."""
        keys = []
        if self.concurrency_key is not None and self._holds(self.before) and not self._holds(self.after):
            keys.append(self.concurrency_key)
        if self.queue in concurrency_queues and self.before == RunStatus.RUNNING and self.after != RunStatus.RUNNING:
            keys.append(queue_concurrency_reason(self.queue))
        return keys

    def _holds(self, status: str) -> bool:
        return status == RunStatus.RUNNING or (
            self.while_waiting and self.started and status in (RunStatus.PENDING, RunStatus.WAITING)
        )


def admission_params() -> dict[str, Any]:
    """The claim statement's parameters for the admission: every limited queue's limits now, and the knobs."""
    limits = configured_queue_limits()
    queues = sorted(limits)
    return {
        "limited_queues": queues,
        "limit_queues": queues,
        "queue_concurrency": [limits[queue].concurrency for queue in queues],
        "queue_rate_limit": [rate[0] if (rate := limits[queue].rate) else None for queue in queues],
        "queue_rate_per": [rate[1] if (rate := limits[queue].rate) else None for queue in queues],
        "rate_window_guard": RATE_WINDOW_GUARD,
        "hold_batch": HOLD_BATCH,
    }


def release_slots(cur: CursorWrapper, changes: list[SlotChange]) -> None:
    """After runs gave up limit slots (in this transaction): release as many held runs, under the keys' locks."""
    concurrency_queues = {q for q, limits in configured_queue_limits().items() if limits.concurrency is not None}
    freed: dict[str, int] = {}
    for change in changes:
        for key in change.freed(concurrency_queues):
            freed[key] = freed.get(key, 0) + 1
    release_held(cur, freed)


def release_held(cur: CursorWrapper, freed: dict[str, int]) -> int:
    """Release, for each limit key, as many held runs as slots it freed.

    Returns:
        How many runs were released.
    """
    if not freed:
        return 0
    cur.execute(RELEASE_HELD, {"reasons": list(freed), "counts": list(freed.values()), "channel": WAKE_CHANNEL})
    released: int = cur.fetchone()[0]
    return released
