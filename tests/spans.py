"""The OpenTelemetry SDK as the tests configure it: spans kept in memory here, or written to a file by a worker.

A process has one tracer provider for its life. The test process installs one
whose spans reach the SDK's InMemorySpanExporter only while a test captures
them (``capture()``), so other tests' spans do not pile up. A worker started
with ``DURABLE_TEST_SPANS_FILE`` (tests/settings.py) writes every span it ends
to that file, one JSON object a line, as it ends: what a worker SIGKILLed
later had ended is kept.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

_lock = threading.Lock()
_gate: _Gate | None = None


class _Gate(SpanProcessor):
    """Hands ended spans to the in-memory exporter while a test captures them."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.inner = SimpleSpanProcessor(self.exporter)
        self.capturing = False

    def on_end(self, span: ReadableSpan) -> None:
        if self.capturing:
            self.inner.on_end(span)


def capture() -> InMemorySpanExporter:
    """Start capturing this process's spans in memory (an empty exporter); ``release()`` stops it."""
    global _gate
    with _lock:
        if _gate is None:
            _gate = _Gate()
            provider = TracerProvider()
            provider.add_span_processor(_gate)
            trace.set_tracer_provider(provider)
        _gate.exporter.clear()
        _gate.capturing = True
        return _gate.exporter


def release() -> None:
    if _gate is not None:
        _gate.capturing = False
        _gate.exporter.clear()


class JsonLinesExporter(SpanExporter):
    """Appends each span to a file as one JSON line, flushed at once."""

    def __init__(self, path: str | Path) -> None:
        self.path = path

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with open(self.path, "a") as handle:
            for span in spans:
                handle.write(json.dumps(as_dict(span)) + "\n")
        return SpanExportResult.SUCCESS


def export_to_file(path: str) -> None:
    """This process's spans go to ``path`` as each one ends."""
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(JsonLinesExporter(path)))
    trace.set_tracer_provider(provider)


def as_dict(span: ReadableSpan) -> dict[str, Any]:
    """What the tests read of a span, with ids as hex as W3C traceparent spells them."""
    return {
        "name": span.name,
        "trace_id": f"{span.context.trace_id:032x}",
        "span_id": f"{span.context.span_id:016x}",
        "parent_id": f"{span.parent.span_id:016x}" if span.parent else None,
        "attributes": dict(span.attributes or {}),
        "events": [{"name": event.name, "attributes": dict(event.attributes or {})} for event in span.events],
        "status": span.status.status_code.name,
    }


def read_file(path: str | Path) -> list[dict[str, Any]]:
    try:
        with open(path) as handle:
            return [json.loads(line) for line in handle if line.strip()]
    except FileNotFoundError:
        return []
