"""Frozen value objects handed upward from the store: never model instances."""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypedDict

from .exceptions import InvalidInput
from .states import RunStatus
from .values import integer, seconds


def _finite_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryPolicy:
    """How a failing run is retried.

    The delay before retry ``n`` is ``min(initial_delay * backoff**(n-1), max_delay)``,
    of which the fraction ``jitter`` is drawn at random (1.0 is full jitter).
    A run snapshots its policy at enqueue, so redeploying workers never changes
    the delays a run still has to wait.
    """

    max_attempts: int = 3
    initial_delay: float = 1.0
    max_delay: float = 300.0
    backoff: float = 2.0
    jitter: float = 1.0

    def __post_init__(self) -> None:
        integer(self.max_attempts, what="RetryPolicy.max_attempts", minimum=1)
        seconds(self.initial_delay, what="RetryPolicy.initial_delay", allow_none=False)
        seconds(self.max_delay, what="RetryPolicy.max_delay", allow_none=False)
        if not _finite_number(self.backoff) or self.backoff < 1 or self.backoff > 100:
            raise InvalidInput(f"RetryPolicy.backoff must be a number between 1 and 100, got {self.backoff!r}")
        if not _finite_number(self.jitter) or not 0 <= self.jitter <= 1:
            raise InvalidInput(f"RetryPolicy.jitter must be between 0 and 1, got {self.jitter!r}")

    def delay_before_retry(self, failures: int, rng: random.Random | None = None) -> float:
        """Seconds to wait before the retry that follows failure number ``failures``."""
        try:
            base = min(self.initial_delay * float(self.backoff) ** (failures - 1), self.max_delay)
        except OverflowError:  # after enough failures the power outgrows a float: the cap applies
            base = self.max_delay
        drawn = (rng or random).random()
        return base * (1 - self.jitter) + base * self.jitter * drawn

    def as_json(self) -> dict[str, float]:
        return {
            "max_attempts": self.max_attempts,
            "initial_delay": self.initial_delay,
            "max_delay": self.max_delay,
            "backoff": self.backoff,
            "jitter": self.jitter,
        }

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

    @property
    def is_live(self) -> bool:
        return self.status in (RunStatus.PENDING, RunStatus.RUNNING, RunStatus.WAITING)


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
