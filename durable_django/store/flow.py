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
slot releases the first run held by its key.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db.backends.utils import CursorWrapper

from ..flow_control import QUEUE_CONCURRENCY_PREFIX, configured_queue_limits, queue_concurrency_reason
from ..states import RunStatus
from .db import WAKE_CHANNEL, cursor

# A rate's window is counted this much longer than declared: an attempt's handler starts a few
# milliseconds after its claim commits, and that jitter must not let N+1 handlers start within one window.
RATE_WINDOW_GUARD = 1.02

# Due runs of a saturated function key held at once, per claim (bounds one statement's work).
HOLD_BATCH = 10_000

# Release the first runs each freed key holds, under the keys' locks, and wake the queues' workers.
RELEASE_HELD = "SELECT durable_release_held(%(reasons)s::text[], %(counts)s::int[], %(channel)s::text)"

# What a limit key holds back and what runs under it now: a function's or queue's concurrency key
# counts the runs holding its slots, a rate key the runs it limits that are running.
_RUNNING_UNDER = f"""CASE
    WHEN key LIKE '{QUEUE_CONCURRENCY_PREFIX}%%' OR key LIKE 'rate:queue:%%' THEN (
        SELECT count(*) FROM durable_run
        WHERE status = 'running' AND queue = regexp_replace(key, '^(concurrency|rate):queue:', ''))
    WHEN key LIKE 'concurrency:%%' THEN (
        SELECT count(*) FROM durable_run
        WHERE concurrency_key = key AND concurrency_key IS NOT NULL
          AND (status = 'running' OR (concurrency_while_waiting AND started_at IS NOT NULL
                                      AND status = ANY (ARRAY['pending', 'waiting']))))
    ELSE (SELECT count(*) FROM durable_run WHERE status = 'running' AND rate_key = key) END"""

# The keys holding most runs back, each with how many it holds and how many run under it now.
HELD_BY_KEY = f"""
WITH held AS (
    SELECT held_by AS key, count(*) AS held FROM (
        SELECT held_by FROM durable_run WHERE status = 'pending' AND held_by IS NOT NULL
        ORDER BY held_by LIMIT %(cap)s
    ) h
    GROUP BY held_by
    ORDER BY count(*) DESC, held_by
    LIMIT %(keys)s
)
SELECT key, held, {_RUNNING_UNDER} FROM held
"""

# One key's runs held back and runs under it now.
KEY_STATE = f"""
SELECT (SELECT count(*) FROM durable_run WHERE status = 'pending' AND held_by = key), {_RUNNING_UNDER}
FROM (SELECT %(key)s::text AS key) k
"""


@dataclass(frozen=True, slots=True)
class LimitState:
    """A limit key as an operator sees it: the due runs it holds back and the runs under it now."""

    key: str
    held: int
    running: int


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


def held_by_key(*, cap: int = 10_000, keys: int = 20, using: str | None = None) -> list[LimitState]:
    """The keys holding most runs back, most first; at most ``keys`` of them.

    At most ``cap`` held runs are read (a key's count is then a floor), so it
    costs the same whatever the table holds. ``using``: the alias to read from
    (a replica); the durable alias by default.
    """
    with cursor(using) as cur:
        cur.execute(HELD_BY_KEY, {"cap": cap, "keys": keys})
        return [LimitState(key, held, running) for key, held, running in cur.fetchall()]


def key_state(key: str) -> LimitState:
    """How many runs ``key`` holds back and how many run under it now."""
    with cursor() as cur:
        cur.execute(KEY_STATE, {"key": key})
        held, running = cur.fetchone()
    return LimitState(key, held, running)
