"""Flow control as values: concurrency limits, rate limits and debounce, and the keys that name them.

A function's limits are declared on ``durable_function`` and their keys are
computed once, at enqueue, from the run's input, then stored on the run: a
changed key callable never re-keys an existing run. A queue's limits come
from ``DURABLE["QUEUES"]`` (and a Django Tasks backend's ``OPTIONS["queues"]``)
at claim time. Every key is also what ``Run.held_by`` shows when that limit
holds a due run back.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any

from .exceptions import InvalidInput
from .storable import count, name, seconds

KeyFunction = Callable[[Any], "str | None"]


@dataclass(frozen=True, slots=True)
class Concurrency:
    """At most ``limit`` runs of the function (per key, when ``key`` is given) hold an attempt at once.

    Args:
        limit: how many at once, across every worker on every host.
        key: a callable of the run's input returning a str (or None: that run is not limited).
        while_waiting: a run that started counts until it finishes, also while it sleeps or waits.
    """

    limit: int
    key: KeyFunction | None = field(default=None, kw_only=True)
    while_waiting: bool = field(default=False, kw_only=True)

    def __post_init__(self) -> None:
        count(self.limit, what="Concurrency.limit")
        if self.key is not None and not callable(self.key):
            raise InvalidInput(f"Concurrency.key must be a callable of the input, got {self.key!r}")
        if not isinstance(self.while_waiting, bool):
            raise InvalidInput(f"Concurrency.while_waiting must be a bool, got {self.while_waiting!r}")


@dataclass(frozen=True, slots=True)
class RateLimit:
    """At most ``limit`` attempts start in any window of length ``per`` (per key, when ``key`` is given).

    Args:
        limit: starts per window, across every worker.
        per: the window, a timedelta or seconds.
        key: a callable of the run's input returning a str (or None: that run is not limited).
    """

    limit: int
    per: timedelta | float = field(kw_only=True)
    key: KeyFunction | None = field(default=None, kw_only=True)

    def __post_init__(self) -> None:
        count(self.limit, what="RateLimit.limit")
        seconds(self.per, what="RateLimit.per", allow_none=False, positive=True)
        if self.key is not None and not callable(self.key):
            raise InvalidInput(f"RateLimit.key must be a callable of the input, got {self.key!r}")

    @property
    def per_seconds(self) -> float:
        return seconds(self.per, what="RateLimit.per", allow_none=False)


@dataclass(frozen=True, slots=True)
class Debounce:
    """Coalesce bursts of submits into one run: last input wins, the start moves to ``delay`` after the
    latest call, but never later than ``max_wait`` after the first.

    Args:
        key: the debounce key (tenant-scoped, per function).
        delay: a timedelta or seconds after each call.
        max_wait: a timedelta or seconds after the call that created the run, or None.
    """

    key: str
    delay: timedelta | float
    max_wait: timedelta | float | None = None

    def __post_init__(self) -> None:
        name(self.key, what="Debounce.key")
        seconds(self.delay, what="Debounce.delay", allow_none=False)
        seconds(self.max_wait, what="Debounce.max_wait")

    @property
    def delay_seconds(self) -> float:
        return seconds(self.delay, what="Debounce.delay", allow_none=False)

    @property
    def max_wait_seconds(self) -> float | None:
        return seconds(self.max_wait, what="Debounce.max_wait")


@dataclass(frozen=True, slots=True)
class QueueLimits:
    """A queue's limits: runs holding an attempt at once, and attempt starts per window."""

    concurrency: int | None = None
    rate: tuple[int, float] | None = None


@dataclass(frozen=True, slots=True)
class RunLimits:
    """A function's limits as stored on one run: keys computed from its input at enqueue."""

    concurrency_key: str | None = None
    concurrency_limit: int | None = None
    while_waiting: bool = False
    rate_key: str | None = None
    rate_limit: int | None = None
    rate_per: float | None = None


def concurrency_reason(function: str, key: str | None = None) -> str:
    return f"concurrency:{function}" if key is None else f"concurrency:{function}:{key}"


def rate_reason(function: str, key: str | None = None) -> str:
    return f"rate:{function}" if key is None else f"rate:{function}:{key}"


QUEUE_CONCURRENCY_PREFIX = "concurrency:queue:"


def queue_concurrency_reason(queue: str) -> str:
    return f"{QUEUE_CONCURRENCY_PREFIX}{queue}"


def run_limits(function: str, input: Any, concurrency: Concurrency | None, rate_limit: RateLimit | None) -> RunLimits:
    """The keys a run of ``function`` with ``input`` is limited by.

    Raises:
        InvalidInput: a key callable raised, or returned something other than a str or None.
    """
    limits = RunLimits()
    if concurrency is not None:
        key = _key(concurrency.key, input, what="Concurrency.key")
        if key is not _UNLIMITED:
            limits = replace(
                limits,
                concurrency_key=concurrency_reason(function, key),
                concurrency_limit=concurrency.limit,
                while_waiting=concurrency.while_waiting,
            )
    if rate_limit is not None:
        key = _key(rate_limit.key, input, what="RateLimit.key")
        if key is not _UNLIMITED:
            limits = replace(
                limits,
                rate_key=rate_reason(function, key),
                rate_limit=rate_limit.limit,
                rate_per=rate_limit.per_seconds,
            )
    return limits


_UNLIMITED: Any = object()


def _key(key_function: KeyFunction | None, input: Any, *, what: str) -> Any:
    """The key of one run: None when the limit has no key (one key for all runs), _UNLIMITED when the
    callable says this run is not limited."""
    if key_function is None:
        return None
    try:
        key = key_function(input)
    except Exception as exc:  # a key callable is the caller's code: whatever it raises is bad input
        raise InvalidInput(f"{what} raised {type(exc).__name__}: {exc}") from exc
    if key is None:
        return _UNLIMITED
    if not isinstance(key, str):
        raise InvalidInput(f"{what} must return a str or None, got {key!r}")
    return name(key, what=what)


def queue_limits(declared: Mapping[str, Any] | None, *, what: str) -> dict[str, QueueLimits]:
    """Parse a ``{"queue": {"concurrency": n, "rate_limit": (limit, seconds)}}`` mapping.

    Raises:
        InvalidInput: a malformed entry (the message names ``what`` and the queue).
    """
    if declared is None:
        return {}
    if not isinstance(declared, Mapping):
        raise InvalidInput(f"{what} must be a dict of queue name -> limits")
    parsed = {}
    for queue, entry in declared.items():
        queue_name = name(queue, what=f"a queue name in {what}")
        if not isinstance(entry, Mapping) or set(entry) - {"concurrency", "rate_limit"}:
            raise InvalidInput(f"{what}[{queue!r}] must be a dict with 'concurrency' and/or 'rate_limit'")
        concurrency = entry.get("concurrency")
        if concurrency is not None:
            count(concurrency, what=f"{what}[{queue!r}]['concurrency']")
        rate = entry.get("rate_limit")
        if rate is not None:
            try:
                limit, per = rate
            except (TypeError, ValueError):
                raise InvalidInput(f"{what}[{queue!r}]['rate_limit'] must be (limit, seconds)") from None
            count(limit, what=f"{what}[{queue!r}]['rate_limit'] limit")
            per_seconds = seconds(per, what=f"{what}[{queue!r}]['rate_limit'] seconds", allow_none=False, positive=True)
            rate = (limit, per_seconds)
        parsed[queue_name] = QueueLimits(concurrency=concurrency, rate=rate)
    return parsed


# Where queue limits are declared besides DURABLE["QUEUES"]: each plug-in adds a callable (the Django
# Tasks plug-in, its backends' OPTIONS["queues"]).
_queue_limit_sources: list[Callable[[], dict[str, QueueLimits]]] = []


def add_queue_limit_source(source: Callable[[], dict[str, QueueLimits]]) -> None:
    """Declare another place queue limits come from (read at every claim, so settings apply at once)."""
    if source not in _queue_limit_sources:
        _queue_limit_sources.append(source)


def configured_queue_limits() -> dict[str, QueueLimits]:
    """Every queue's limits now: ``DURABLE["QUEUES"]`` and the plug-ins', the stricter where both declare one.

    Raises:
        InvalidInput: a malformed declaration (the system checks report it at start-up).
    """
    from .conf import durable_settings

    declared = queue_limits(durable_settings.QUEUES, what='DURABLE["QUEUES"]')
    return strictest(declared, *(source() for source in _queue_limit_sources))


def strictest(*maps: dict[str, QueueLimits]) -> dict[str, QueueLimits]:
    """Merge queue limits declared in several places: where two declare one queue, the stricter applies."""
    merged: dict[str, QueueLimits] = {}
    for limits in maps:
        for queue, new in limits.items():
            old = merged.get(queue, QueueLimits())
            concurrency = min(filter(None, (old.concurrency, new.concurrency)), default=None)
            rates = [rate for rate in (old.rate, new.rate) if rate is not None]
            rate = min(rates, key=lambda pair: pair[0] / pair[1]) if rates else None
            merged[queue] = QueueLimits(concurrency=concurrency, rate=rate)
    return merged
