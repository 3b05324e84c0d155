"""OpenTelemetry spans of attempts and steps; inert unless the ``opentelemetry-api`` package is installed.

``enqueue`` stores the W3C trace context (``traceparent``, ``tracestate``) of the
span current at the call on the run. Each attempt is a span
``durable.attempt {function}`` whose parent is that context, so a run's spans
join the trace of the request that started it, in whatever process the attempt
runs; a child run stores its parent's attempt span instead. Each step that
executes is a child span ``durable.step {name}``; a replayed step is only an
event on the attempt span (its work was done, and traced, by an earlier one).

The API alone records nothing: spans are made, and exported, once the
application configures an SDK (``opentelemetry-sdk``); until then an attempt
costs one check. Without the API every function here returns at its first line,
and nothing is imported.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from ..exceptions import DurableControlFlow

try:
    from opentelemetry import context as otel_context
    from opentelemetry import trace
    from opentelemetry.trace import SpanKind, Status, StatusCode
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    INSTALLED = True
except ImportError:  # the otel extra is not installed: tracing is off
    INSTALLED = False

if TYPE_CHECKING:
    from .attempt import Attempt

if INSTALLED:
    # W3C Trace Context whatever propagator the application configured: it is what the run stores.
    _PROPAGATOR = TraceContextTextMapPropagator()
    _TRACER = trace.get_tracer("durable_django")

# Outcomes that are errors of the attempt: the span records the exception and an error status.
ERROR_OUTCOMES = frozenset({"failed", "retrying", "timed_out"})


def current_context() -> dict[str, str] | None:
    """The W3C trace context of the span current in this thread, to store on a run enqueued now."""
    if not INSTALLED:
        return None
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier)
    return carrier or None


def context_for_children(attempt: Attempt) -> dict[str, str] | None:
    """The trace context a child spawned by this attempt stores: its attempt span, else its own run's."""
    if not INSTALLED:
        return None
    span = attempt.span
    if span is not None and span.get_span_context().is_valid:
        carrier: dict[str, str] = {}
        _PROPAGATOR.inject(carrier, context=trace.set_span_in_context(span))
        return carrier
    return attempt.run.trace_context


def configured() -> bool:
    """An SDK (a tracer provider) is configured: without one the API records nothing, so no span is made."""
    return INSTALLED and not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


def start_attempt(attempt: Attempt) -> None:
    """Open the attempt's span, a child of the trace context stored on its run (a new trace without one)."""
    if not configured():
        return
    run = attempt.run
    # An empty context, not the current one: a run enqueued outside any span starts a trace of its own.
    parent = otel_context.Context()
    if run.trace_context:
        parent = _PROPAGATOR.extract(run.trace_context, context=parent)
    attributes: dict[str, str | int] = {
        "durable.run_id": run.run_id,
        "durable.function": run.name,
        "durable.version": run.version,
        "durable.attempt": attempt.token,
        "durable.queue": run.queue,
    }
    if run.tenant_id is not None:
        attributes["durable.tenant_id"] = run.tenant_id
    attempt.span = _TRACER.start_span(
        f"durable.attempt {run.name}", context=parent, kind=SpanKind.CONSUMER, attributes=attributes
    )


@contextmanager
def current(attempt: Attempt) -> Iterator[None]:
    """Make the attempt's span the current one while its handler runs, so the handler's own spans nest in it."""
    if attempt.span is None:
        yield
        return
    token = otel_context.attach(trace.set_span_in_context(attempt.span))
    try:
        yield
    finally:
        otel_context.detach(token)


def recording(attempt: Attempt) -> bool:
    """The attempt's span records (an SDK is configured): each step that executes gets a span of its own."""
    span = attempt.span
    return span is not None and span.is_recording()


@contextmanager
def step(attempt: Attempt, name: str, occurrence: int) -> Iterator[None]:
    """A span ``durable.step {name}``, current while the step's function runs and its value is journalled."""
    parent = attempt.span
    if parent is None or not parent.is_recording():
        yield
        return
    span = _TRACER.start_span(
        f"durable.step {name}",
        context=trace.set_span_in_context(parent),
        attributes={"durable.step": name, "durable.step.occurrence": occurrence, "durable.run_id": attempt.run.run_id},
    )
    token = otel_context.attach(trace.set_span_in_context(span))
    try:
        yield
    except BaseException as exc:
        if not isinstance(exc, DurableControlFlow):  # a stop or a suspension is no error of the step
            span.record_exception(exc)
            span.set_status(Status(StatusCode.ERROR, _describe(exc)))
        raise
    finally:
        otel_context.detach(token)
        span.end()


def step_replayed(attempt: Attempt, name: str) -> None:
    """A step returned its journalled value: an event on the attempt span, not a span of its own."""
    span = attempt.span
    if span is not None and span.is_recording():
        span.add_event("durable.step.replayed", {"durable.step": name})


def end_attempt(attempt: Attempt, outcome: str | None, what: str) -> None:
    """Close the attempt's span with its outcome; ``what`` says what happened when there is none to report."""
    span = attempt.span
    if span is None:
        return
    attempt.span = None
    if outcome is not None:
        span.set_attribute("durable.outcome", outcome)
    error = attempt.error
    if outcome in ERROR_OUTCOMES and error is not None:
        span.record_exception(error)
        span.set_status(Status(StatusCode.ERROR, _describe(error)))
    elif outcome is None:
        # Another worker took the run over, or this one could not land what the attempt did.
        span.set_attribute("durable.attempt.ended", what)
    span.end()


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"
