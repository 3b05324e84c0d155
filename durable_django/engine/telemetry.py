"""What the engine tells the outside world about attempts and steps: spans, observers and log fields.

Every attempt is reported once it starts and once it ends, from its one end
point (``Attempt.end``; for a success the worker lands in a batch, only after
that landing). Spans go to OpenTelemetry (``tracing``); observers are what a
process installs to count, as ``durable_worker --metrics-port`` installs its
Prometheus metrics; the application's receivers get Django signals
(``signalling``). With no observer and no OpenTelemetry a report is a test of
an empty tuple and a flag.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import TYPE_CHECKING, Any, Protocol

from . import signalling, tracing

if TYPE_CHECKING:
    from .attempt import Attempt

# The outcomes an attempt is counted, traced and logged with (``durable.outcome``, the ``outcome`` label).
OUTCOMES = ("succeeded", "failed", "retrying", "suspended", "cancelled", "timed_out")
# The error of an attempt that ran out of time (the time limits' exception) makes its outcome timed_out.
TIMED_OUT_ERROR = "durable_django.exceptions.AttemptTimedOut"


class Observer(Protocol):
    """Told about attempts as they start, step, and end (a process's metrics)."""

    def attempt_started(self, attempt: Attempt) -> None: ...

    def step_executed(self, attempt: Attempt) -> None: ...

    def attempt_ended(self, attempt: Attempt, outcome: str | None, seconds: float) -> None: ...


_observers: tuple[Observer, ...] = ()


def observe(observer: Observer) -> None:
    """Report every attempt of this process to ``observer`` from now on."""
    global _observers
    _observers = (*_observers, observer)


def stop_observing(observer: Observer) -> None:
    global _observers
    _observers = tuple(other for other in _observers if other is not observer)


def outcome_of(attempt: Attempt, what: str) -> str | None:
    """The reported outcome of an attempt that ended as ``what`` (an engine Outcome's value).

    None when it has none to report: another worker took the run over, or this
    worker could not land what the attempt did (the run is recovered either way).
    """
    error = attempt.error
    if error is not None and f"{type(error).__module__}.{type(error).__qualname__}" == TIMED_OUT_ERROR:
        return "timed_out"
    return what if what in OUTCOMES else None


def attempt_started(attempt: Attempt) -> None:
    attempt.began = time.monotonic()
    tracing.start_attempt(attempt)
    for observer in _observers:
        observer.attempt_started(attempt)
    signalling.attempt_started(attempt)


_UNSEEN = nullcontext()


def step(attempt: Attempt, name: str, occurrence: int) -> AbstractContextManager[None]:
    """Around a step that executes: its span, and its count once its value is journalled.

    With no observer and no span recording it is nothing at all: every step crosses it.
    """
    if not _observers and not tracing.recording(attempt):
        return _UNSEEN
    return _seen_step(attempt, name, occurrence)


@contextmanager
def _seen_step(attempt: Attempt, name: str, occurrence: int) -> Iterator[None]:
    with tracing.step(attempt, name, occurrence):
        yield
    for observer in _observers:
        observer.step_executed(attempt)


def replay_diverged(attempt: Attempt) -> None:
    """A replay of the attempt took another path than its journal's (counted once per attempt)."""
    for observer in _observers:
        diverged = getattr(observer, "replay_diverged", None)  # observers written before it need not have it
        if diverged is not None:
            diverged(attempt)


def step_replayed(attempt: Attempt, name: str) -> None:
    tracing.step_replayed(attempt, name)


def attempt_ended(attempt: Attempt, what: str) -> None:
    """The attempt ended (``what`` is an engine Outcome's value): end its span, tell observers.

    Called by ``Attempt.end`` only, which calls it once per attempt, whichever thread ends it first.
    """
    outcome = outcome_of(attempt, what)
    tracing.end_attempt(attempt, outcome, what)
    if _observers:
        seconds = time.monotonic() - attempt.began
        for observer in _observers:
            observer.attempt_ended(attempt, outcome, seconds)
    if outcome is not None:
        signalling.attempt_finished(attempt, outcome)


def log_fields(attempt: Attempt, outcome: str | None = None) -> dict[str, Any]:
    """The ``extra`` of a log record about an attempt: any formatter (a JSON one) can emit these fields."""
    fields: dict[str, Any] = {"run_id": attempt.run.run_id, "function": attempt.run.name, "attempt": attempt.token}
    if outcome is not None:
        fields["outcome"] = str(outcome)
    return fields
