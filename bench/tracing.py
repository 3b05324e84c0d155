"""The OpenTelemetry SDK as an instrumented benchmark worker runs it: a batch processor and an exporter that
keeps nothing but a count, written to ``BENCH_OTEL_SPANS_FILE`` when the process exits (so the benchmark
can check every attempt was traced)."""

from __future__ import annotations

from collections.abc import Sequence

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult


class CountingExporter(SpanExporter):
    """Drops every span, counting them; the count is written at shutdown (process exit)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.exported = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.exported += len(spans)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        with open(self.path, "w") as handle:
            handle.write(str(self.exported))


def install(path: str) -> None:
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(CountingExporter(path)))
    trace.set_tracer_provider(provider)
