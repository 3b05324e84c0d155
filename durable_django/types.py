"""Frozen value objects handed upward from the store: never model instances."""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, TypedDict

from .exceptions import InvalidInput
from .states import RunStatus
from .storable import count, number, seconds

# What the failure of a run's last allowed attempt does.
ON_EXHAUSTED = ("fail", "park")


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryPolicy:
    """How a failing run is retried.

    The delay before retry ``n`` is ``min(initial_delay * backoff**(n-1), max_delay)``,
    of which the fraction ``jitter`` is drawn at random (1.0 is full jitter).
    A run snapshots its policy at enqueue, so redeploying workers never changes
    the delays a run still has to wait. ``on_exhausted`` says what the failure of
    the last allowed attempt does: ``"fail"`` the run, or ``"park"`` it for an
    operator (it waits, holding no worker, until ``resume()`` or ``cancel()``).
    """

    max_attempts: int = 3
    initial_delay: float = 1.0
    max_delay: float = 300.0
    backoff: float = 2.0
    jitter: float = 1.0
    on_exhausted: str = "fail"

    def __post_init__(self) -> None:
        count(self.max_attempts, what="RetryPolicy.max_attempts")
        seconds(self.initial_delay, what="RetryPolicy.initial_delay", allow_none=False)
        seconds(self.max_delay, what="RetryPolicy.max_delay", allow_none=False)
        number(self.backoff, what="RetryPolicy.backoff", minimum=1, maximum=100)
        number(self.jitter, what="RetryPolicy.jitter", minimum=0, maximum=1)
        if self.on_exhausted not in ON_EXHAUSTED:
            raise InvalidInput(
                f"RetryPolicy.on_exhausted must be one of {', '.join(map(repr, ON_EXHAUSTED))}, "
                f"got {self.on_exhausted!r}"
            )

    @property
    def parks(self) -> bool:
        """The failure of the last allowed attempt parks the run rather than failing it."""
        return self.on_exhausted == "park"

    def delay_before_retry(self, failures: int, rng: random.Random | None = None) -> float:
        """Seconds to wait before the retry that follows failure number ``failures``."""
        try:
            base = min(self.initial_delay * float(self.backoff) ** (failures - 1), self.max_delay)
        except OverflowError:  # after enough failures the power outgrows a float: the cap applies
            base = self.max_delay
        drawn = (rng or random).random()
        return base * (1 - self.jitter) + base * self.jitter * drawn

    def as_json(self) -> dict[str, float | str]:
        policy: dict[str, float | str] = {
            "max_attempts": self.max_attempts,
            "initial_delay": self.initial_delay,
            "max_delay": self.max_delay,
            "backoff": self.backoff,
            "jitter": self.jitter,
        }
        if self.parks:  # the default is left out, so the policies stored before it read the same
            policy["on_exhausted"] = self.on_exhausted
        return policy

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> RetryPolicy:
        return cls(**(data or {}))


class ChildResult(TypedDict):
    """What ``ctx.wait_for_result()`` returns: how a child landed (or that the wait timed out)."""

    # "succeeded", "failed", "cancelled", or "timeout".
    state: str
    # The child's output (succeeded), else None.
    result: Any
    # The child's error (failed), else None.
    error: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class Run:
    """One durable run, as the store last saw it."""

    run_id: str
    name: str
    version: int
    status: RunStatus
    input: Any
    output: Any
    error: str | None
    attempts: int
    tenant_id: str | None
    idempotency_key: str | None
    coalesce_key: str | None
    parent_run_id: str | None
    queue: str
    priority: int
    available_at: datetime | None
    leased_until: datetime | None
    created_at: datetime
    updated_at: datetime
    cancel_requested_at: datetime | None
    cancel_refused_at: datetime | None
    # Beyond the contract's fields: what operators and the engine also read.
    error_type: str | None = None
    failures: int = 0
    recoveries: int = 0
    retry_policy: RetryPolicy = field(default_factory=RetryPolicy)
    waiting_for: str | None = None
    pivoted_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    worker_id: str | None = None
    # When the current claim's attempt started; None while a claimed run waits for a worker's slot.
    attempt_started_at: datetime | None = None
    # Which limit holds this due pending run back ("concurrency:crm.sync:42"), or None (see Concurrency, RateLimit).
    held_by: str | None = None
    # A run not finished by this instant ends failed with DeadlineExceeded (see enqueue(deadline=...)).
    deadline: datetime | None = None
    # What the handler last reported with ctx.set_progress(), kept across attempts.
    progress: Any = None
    # The W3C trace context (traceparent, tracestate) of the code that enqueued the run, if it was traced.
    trace_context: dict[str, str] | None = None
    # When the failure of its last allowed attempt parked it for an operator (``waiting_for`` "operator").
    parked_at: datetime | None = None
    # A fork's origin, {"run_id": ..., "step": ...} (step None: forked whole), or None (see fork()).
    forked_from: dict[str, Any] | None = None

    @property
    def is_live(self) -> bool:
        return self.status in (RunStatus.PENDING, RunStatus.RUNNING, RunStatus.WAITING)


@dataclass(frozen=True, slots=True)
class Pause:
    """A paused function or queue (exactly one of the two is set): its due runs wait until it is unpaused."""

    function: str | None
    queue: str | None
    reason: str
    created_at: datetime

    @property
    def key(self) -> str:
        """What ``Run.held_by`` shows for the runs it holds."""
        return pause_key(function=self.function, queue=self.queue)


# Every pause's key, as Run.held_by shows it, starts with this.
PAUSE_PREFIX = "paused:"


def pause_key(*, function: str | None, queue: str | None) -> str:
    """The ``held_by`` of the runs a pause of this function (or else this queue) holds."""
    return f"{PAUSE_PREFIX}function:{function}" if function is not None else f"{PAUSE_PREFIX}queue:{queue}"


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamItem:
    """One item of a run's stream (see ``read_stream``)."""

    # Its place in the stream: 0, 1, 2, ... in the order the writes committed.
    offset: int
    value: Any
    # The attempt (fence token) that wrote it.
    attempt: int
    written_at: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class AttemptRecord:
    """One claim of a run: who held it, from when to when, and how it ended.

    ``outcome`` is one of ``running``, ``succeeded``, ``failed``, ``retrying``, ``suspended``,
    ``cancelled``, ``timed_out``, ``lost`` (its lease expired or its worker died) and ``released``
    (handed back at a graceful shutdown); ``error`` and ``error_type`` are set for failures,
    timeouts and losses.
    """

    # The claim's fence token: 1 for the first claim, then one more for each.
    number: int
    worker_id: str | None
    started_at: datetime | None
    # None while it runs.
    ended_at: datetime | None
    outcome: str
    error: str | None = None
    error_type: str | None = None
    # What a suspended attempt left its run waiting for ("sleep", "signal:<name>:<n>", "child:<run id>", ...).
    waited_for: str | None = None

    @property
    def duration(self) -> timedelta | None:
        if self.started_at is None or self.ended_at is None:
            return None
        return self.ended_at - self.started_at


@dataclass(frozen=True, slots=True, kw_only=True)
class RunPage:
    """One page of :func:`list_runs`; pass ``next_cursor`` back for the next."""

    items: list[Run]
    next_cursor: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class Schedule:
    """A cron schedule that enqueues one run per tick."""

    schedule_id: str
    name: str
    cron: str
    tz: str
    input: Any
    next_fire_at: datetime
    enabled: bool
    tenant_id: str | None
    created_at: datetime
    updated_at: datetime
    # What a tick does while a run of this schedule is live (docs/schedules.md).
    overlap: str = "allow_all"
    catchup_window: timedelta | None = None
    jitter: timedelta | None = None
    pause_on_failure: bool = False
    # Why the schedule disabled itself after a failed run; None while nothing did.
    paused_reason: str | None = None
    # buffer_one: the tick waiting for the live run to end.
    buffered_tick: datetime | None = None
    last_fired_at: datetime | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ScheduleRunRecord:
    """One run a schedule made: its tick (None when fired by hand) and the run's status now."""

    run_id: str
    tick: datetime | None
    status: str
    created_at: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class ClaimedRun:
    """What a worker needs to execute one attempt of a run it just claimed."""

    run: Run
    # The fence token: every write of this attempt must carry it.
    token: int
    # Journal entries of this run, step_id -> decoded JSON value.
    journal: dict[str, Any]
    # True when the run was reclaimed from a holder whose lease expired.
    recovered: bool
