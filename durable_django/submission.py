"""A submit as one typed value, from the caller's options to the rows the store inserts.

``RunOptions`` is what a caller asks of a run (enqueue's, enqueue_many's, spawn's
options), checked by the value domain when it is made. The engine turns it into a
``RunTemplate`` (the function's version and retry snapshot resolved) and then into
a ``SubmitRequest`` (one run) or a ``BatchRequest`` (runs of one function): the
store inserts those as they are, so what was validated is what is written.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.utils import timezone

from .exceptions import InvalidInput
from .flow_control import RunLimits
from .states import MAX_PRIORITY, MIN_PRIORITY
from .storable import instant, integer, name, seconds
from .tenancy import normalize_tenant, scope_engine_key
from .types import RetryPolicy

NO_LIMITS = RunLimits()


@dataclass(frozen=True, slots=True)
class RunOptions:
    """A submit's options, validated: the start, where it is claimed, its deadline, version and retry policy.

    Build it with :meth:`of`, which checks every value; the fields hold the stored forms
    (seconds as floats, aware instants, a normalized tenant id).
    """

    tenant_id: str | None = None
    # Seconds from the database's now before the run may start; or the instant (never both).
    delay: float | None = None
    available_at: datetime | None = None
    # The version asked for; None: the newest registered one.
    version: int | None = None
    queue: str = "default"
    priority: int = 0
    # An instant, or seconds from the database's now (never both).
    deadline: datetime | None = None
    deadline_seconds: float | None = None
    # The policy asked for; None: the function's own, or DEFAULT_RETRY.
    retry: RetryPolicy | None = None

    @classmethod
    def of(
        cls,
        *,
        tenant_id: object = None,
        delay: timedelta | float | None = None,
        available_at: datetime | None = None,
        version: int | None = None,
        queue: str = "default",
        priority: int = 0,
        deadline: datetime | timedelta | float | None = None,
        retry: RetryPolicy | None = None,
    ) -> RunOptions:
        """The options as a caller gives them, checked.

        Raises:
            InvalidInput: any bad value, both a delay and an instant, or a deadline that has passed.
        """
        delay_seconds = seconds(delay, what="delay")
        when = instant(available_at, what="available_at")
        if delay_seconds is not None and when is not None:
            raise InvalidInput("give either delay or available_at, not both")
        if version is not None:
            integer(version, what="version", minimum=0)
        name(queue, what="queue")
        integer(priority, what="priority", minimum=MIN_PRIORITY, maximum=MAX_PRIORITY)
        if retry is not None and not isinstance(retry, RetryPolicy):
            raise InvalidInput(f"retry must be a RetryPolicy, got {retry!r}")
        deadline_at, deadline_seconds = _deadline(deadline)
        return cls(
            tenant_id=normalize_tenant(tenant_id),
            delay=delay_seconds,
            available_at=when,
            version=version,
            queue=queue,
            priority=priority,
            deadline=deadline_at,
            deadline_seconds=deadline_seconds,
            retry=retry,
        )

    def starting_after(self, delay: float) -> RunOptions:
        """The same options with the start ``delay`` seconds from now (a debounced submit's)."""
        return dataclasses.replace(self, delay=delay, available_at=None)


def _deadline(deadline: object) -> tuple[datetime | None, float | None]:
    """A deadline as the store takes it: an instant, or seconds from the database's now."""
    if deadline is None:
        return None, None
    if isinstance(deadline, datetime):
        when = instant(deadline, what="deadline")
        if when is not None and when <= timezone.now():
            raise InvalidInput(f"deadline {deadline.isoformat()} has already passed")
        return when, None
    after = seconds(deadline, what="deadline")
    if after is not None and after <= 0:
        raise InvalidInput(f"deadline {deadline!r} has already passed: give a positive duration")
    return None, after


@dataclass(frozen=True, slots=True)
class RunTemplate:
    """What every run of one submit shares, resolved: the function and version, the options, the retry
    policy's JSON snapshot, the parent and the trace context the run's attempts join."""

    name: str
    version: int | None
    options: RunOptions
    retry_policy: str
    parent_run_id: str | None = None
    trace_context: str | None = None

    @property
    def tenant_id(self) -> str | None:
        return self.options.tenant_id


@dataclass(frozen=True, slots=True)
class SubmitRequest:
    """One run to insert: its template, id, input (JSON text), tenant-scoped keys and limit keys."""

    template: RunTemplate
    run_id: str
    input: str
    idempotency_key: str | None = None
    coalesce_key: str | None = None
    limits: RunLimits = NO_LIMITS
    # A debounced submit: its scoped key and how long after its first call the run starts at the latest.
    debounce_key: str | None = None
    debounce_max_wait: float | None = None

    def with_engine_key(self, key: str) -> SubmitRequest:
        """This request keyed by an engine-made key (a spawn's, a schedule tick's), scoped to its tenant."""
        return dataclasses.replace(self, idempotency_key=scope_engine_key(key, self.template.tenant_id))

    def with_trace_context(self, trace_context: str | None) -> SubmitRequest:
        """This request with the run's attempts joining ``trace_context`` (a spawning attempt's span)."""
        return dataclasses.replace(self, template=dataclasses.replace(self.template, trace_context=trace_context))


@dataclass(frozen=True, slots=True)
class BatchRequest:
    """Runs of one function to insert in one statement: one entry per distinct run in each column.

    A key repeated in the batch makes one run; ``positions`` maps each input, in input order,
    to the index of its run.
    """

    template: RunTemplate
    run_ids: Sequence[str]
    inputs: Sequence[str]
    idempotency_keys: Sequence[str | None]
    limits: Sequence[RunLimits]
    positions: Sequence[int]

    @property
    def size(self) -> int:
        return len(self.run_ids)

    @property
    def keyed(self) -> bool:
        return any(key is not None for key in self.idempotency_keys)

    def subset(self, indexes: Sequence[int]) -> BatchRequest:
        """The same batch restricted to some of its runs (without positions)."""
        return BatchRequest(
            self.template,
            [self.run_ids[index] for index in indexes],
            [self.inputs[index] for index in indexes],
            [self.idempotency_keys[index] for index in indexes],
            [self.limits[index] for index in indexes],
            [],
        )

    def with_trace_context(self, trace_context: str | None) -> BatchRequest:
        """This batch with its runs' attempts joining ``trace_context`` (a spawning attempt's span)."""
        return dataclasses.replace(self, template=dataclasses.replace(self.template, trace_context=trace_context))
