"""Flow control's rules: which limited candidates a claim admits, and which it holds back, and why.

The claim (``store.claims``) takes runs no limit applies to at once and hands
the others here. ``admit`` locks their limits' keys, counts what each limit
has in use (``store.flow``), and decides in claim order: a run is admitted
when every limit it is under has room, and otherwise held by the first that
has none. A held run leaves the claim index until a slot frees (concurrency)
or its rate window reopens (rate): the claim never scans it again meanwhile.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from ..limits import QueueLimits, configured_queue_limits, queue_concurrency_reason, queue_rate_reason
from ..store import flow as flow_store
from ..store.claims import LimitedCandidate
from ..store.flow import Candidate, Usage
from ..types import Run

# A rate's window is counted this much longer than declared: an attempt's handler starts a few
# milliseconds after its claim commits, and that jitter must not let N+1 handlers start within one window.
RATE_WINDOW_GUARD = 1.02

# Due runs of a saturated function key held at once, per claim (bounds one statement's work).
HOLD_BATCH = 10_000


@dataclass
class RateRoom:
    """A rate key's window as one admission sees it."""

    left: int
    limit: int
    per: float
    # The oldest start still in the window: the window reopens ``per`` after it.
    oldest: datetime | None
    # Runs this admission held for the key so far: each later one waits one more window per ``limit``.
    held: int = 0


@dataclass
class Decision:
    """What one admission does: runs to claim (and whether each starts now), runs to hold, keys saturated."""

    admitted: list[tuple[Candidate, bool]] = field(default_factory=list)
    rate_starts: list[tuple[str, float]] = field(default_factory=list)
    held: list[tuple[str, str, datetime | None]] = field(default_factory=list)
    saturated: set[str] = field(default_factory=set)


def limited_queues() -> list[str]:
    """The queues a limit applies to now (``DURABLE["QUEUES"]`` and the plug-ins' declarations)."""
    return sorted(configured_queue_limits())


def admit(
    limited: list[LimitedCandidate], *, start_now: int, worker_id: str, lease_seconds: float
) -> list[tuple[Run, bool, bool, datetime]]:
    """Claim the limited candidates their limits admit and hold the rest.

    Args:
        limited: candidates the claim passed over because a limit applies to them.
        start_now: how many of the admitted start at once (idle slots left after the plain claim).
        worker_id: the claiming worker.
        lease_seconds: the lease each claim takes.

    Returns:
        (run, recovered, started, database now) for each run claimed.
    """
    if not limited:
        return []
    queues = configured_queue_limits()
    keys: set[str] = set()
    for candidate in limited:
        keys.update(key for key in (candidate.concurrency_key, candidate.rate_key) if key)
        keys.update(_queue_keys(candidate.queue, queues.get(candidate.queue)))

    def decide(candidates: list[Candidate], usage: Usage, now: datetime) -> Decision:
        return _decide(candidates, usage, queues, start_now=start_now, now=now)

    return flow_store.admit(
        [candidate.run_id for candidate in limited],
        keys=keys,
        queue_limits=queues,
        decide=decide,
        lease_seconds=lease_seconds,
        worker_id=worker_id,
        hold_batch=HOLD_BATCH,
        rate_window_guard=RATE_WINDOW_GUARD,
    )


def _queue_keys(queue: str, limits: QueueLimits | None) -> list[str]:
    if limits is None:
        return []
    keys = []
    if limits.concurrency is not None:
        keys.append(queue_concurrency_reason(queue))
    if limits.rate is not None:
        keys.append(queue_rate_reason(queue))
    return keys


def _decide(
    candidates: list[Candidate], usage: Usage, queues: dict[str, QueueLimits], *, start_now: int, now: datetime
) -> Decision:
    decision = Decision()
    room: dict[str, int] = {}
    for candidate in candidates:
        key, limit = candidate.concurrency_key, candidate.concurrency_limit
        if key is not None and limit is not None:
            # Runs of one key may carry different limits (a deploy changed it): the smallest applies.
            room[key] = min(room.get(key, limit - usage.concurrency.get(key, 0)), limit - usage.concurrency.get(key, 0))
    for queue, limits in queues.items():
        if limits.concurrency is not None:
            room[queue_concurrency_reason(queue)] = limits.concurrency - usage.queues.get(queue, 0)
    rates: dict[str, RateRoom] = {}
    for candidate in candidates:
        if candidate.rate_key is not None and candidate.rate_limit is not None and candidate.rate_per is not None:
            count, oldest = usage.rates.get(candidate.rate_key, (0, None))
            rates[candidate.rate_key] = RateRoom(
                candidate.rate_limit - count, candidate.rate_limit, candidate.rate_per, oldest
            )
    for queue, limits in queues.items():
        if limits.rate is not None:
            count, oldest = usage.rates.get(queue_rate_reason(queue), (0, None))
            rates[queue_rate_reason(queue)] = RateRoom(limits.rate[0] - count, limits.rate[0], limits.rate[1], oldest)

    starts_left = start_now
    for candidate in sorted(candidates, key=lambda c: (-c.run.priority, c.run.created_at)):
        slots = _slots_needed(candidate, queues)
        rate_keys = _rate_keys(candidate, queues)
        blocked = next((key for key in slots if room[key] <= 0), None)
        if blocked is not None:
            decision.held.append((candidate.run.run_id, blocked, None))  # a freed slot releases it
            if blocked == candidate.concurrency_key:
                decision.saturated.add(blocked)
            continue
        blocked = next((key for key in rate_keys if rates[key].left <= 0), None)
        if blocked is not None:
            decision.held.append((candidate.run.run_id, blocked, _reopens(rates[blocked], now)))
            continue
        if rate_keys and starts_left <= 0:
            continue  # a rate counts starts at the claim: never claim such a run ahead of a free slot
        for key in slots:
            room[key] -= 1
        for key in rate_keys:
            rates[key].left -= 1
            rates[key].oldest = rates[key].oldest or now
            decision.rate_starts.append((key, rates[key].per * RATE_WINDOW_GUARD))
        decision.admitted.append((candidate, starts_left > 0))
        starts_left -= 1
    decision.saturated = {key for key in decision.saturated if room.get(key, 0) <= 0}
    return decision


def _slots_needed(candidate: Candidate, queues: dict[str, QueueLimits]) -> list[str]:
    """The concurrency keys whose slot admitting this run takes (none it already holds)."""
    keys = []
    if candidate.concurrency_key is not None and not candidate.holds_slot:
        keys.append(candidate.concurrency_key)
    limits = queues.get(candidate.run.queue)
    if limits is not None and limits.concurrency is not None and not candidate.holds_queue_slot:
        keys.append(queue_concurrency_reason(candidate.run.queue))
    return keys


def _rate_keys(candidate: Candidate, queues: dict[str, QueueLimits]) -> list[str]:
    """The rate keys an attempt start of this run counts against."""
    keys = [candidate.rate_key] if candidate.rate_key is not None and candidate.rate_limit is not None else []
    limits = queues.get(candidate.run.queue)
    if limits is not None and limits.rate is not None:
        keys.append(queue_rate_reason(candidate.run.queue))
    return keys


def _reopens(rate: RateRoom, now: datetime) -> datetime:
    """When a run a rate limit holds may try again: as the window's oldest starts leave it, ``limit`` at a
    time (so a long queue of held runs is not all looked at again at once)."""
    windows_ahead = rate.held // rate.limit
    rate.held += 1
    return (rate.oldest or now) + timedelta(seconds=rate.per * (RATE_WINDOW_GUARD + windows_ahead))
