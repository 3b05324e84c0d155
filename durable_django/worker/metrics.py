"""Prometheus metrics of a worker process, served on ``/metrics`` by ``durable_worker --metrics-port PORT``.

Needs the ``prometheus`` extra (``prometheus_client``): importing this module
without it raises ExtraNotInstalled, and nothing else imports it. The counters and
histograms are fed by the engine's telemetry (this object observes every
attempt of the process); the gauges are read when Prometheus scrapes: the
slots from the worker's pool, the runs by status and queue from the database
at most every ``POLL_SECONDS``, at a cost that does not grow with the table.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from django.db import connections

from ..conf import durable_settings
from ..engine import lifecycle
from ..engine.attempt import Attempt
from ..exceptions import ExtraNotInstalled

try:
    from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram
    from prometheus_client.core import GaugeMetricFamily
    from prometheus_client.registry import Collector
except ImportError as exc:
    raise ExtraNotInstalled(
        "worker metrics need the prometheus_client package: pip install 'durable-django[prometheus]'"
    ) from exc

from . import metrics_http
from .recovery import Recovering

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

    from .slots import SlotPool

logger = logging.getLogger("durable_django.worker")

# Attempts last from milliseconds to hours; so may a run wait for a free worker.
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)
# Queue names are chosen by whoever enqueues: each new one would be a new series in every scrape, for ever.
# The first this many (besides the configured ones) get a label each; the rest share OTHER_QUEUE.
MAX_QUEUE_LABELS = 50
OTHER_QUEUE = "(other)"


class QueueLabels:
    """The queue label of a series: the queue's name while the label set has room, else OTHER_QUEUE.

    The default queue and those ``DURABLE["QUEUES"]`` configures always have a label of their own;
    a queue once labelled keeps its label for the life of the process.
    """

    def __init__(self, limit: int = MAX_QUEUE_LABELS) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._labelled = {"default", *durable_settings.QUEUES}
        self._others = 0

    def __call__(self, queue: str) -> str:
        if queue in self._labelled:
            return queue
        with self._lock:
            if queue in self._labelled:
                return queue
            if self._others < self.limit:
                self._others += 1
                self._labelled.add(queue)
                return queue
        return OTHER_QUEUE


class WorkerMetrics:
    """The metrics of one worker process, and the HTTP server that exposes them.

    Args:
        registry: where the metrics are registered; Prometheus' default registry (which also has the
            process and Python metrics) unless given.
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = REGISTRY if registry is None else registry
        self.attempts = Counter(
            "durable_attempts",
            "Attempts that ended, by function and outcome.",
            ["function", "outcome"],
            registry=self.registry,
        )
        self.attempts_lost = Counter(
            "durable_attempts_lost",
            "Attempts that ended without an outcome of their own: another worker took the run over, or this "
            "one could not land it (the run is recovered).",
            ["function"],
            registry=self.registry,
        )
        self.steps = Counter(
            "durable_steps", "Steps executed (replays, sleeps and waits are not).", ["function"], registry=self.registry
        )
        self.replay_divergences = Counter(
            "durable_replay_divergences",
            "Attempts whose replay executed a step while the journal held steps it never asked for.",
            ["function"],
            registry=self.registry,
        )
        self.attempt_duration = Histogram(
            "durable_attempt_duration_seconds",
            "How long attempts ran, from their start to their outcome.",
            ["function"],
            buckets=DURATION_BUCKETS,
            registry=self.registry,
        )
        self.queue_lag = Histogram(
            "durable_queue_lag_seconds",
            "How long runs waited to be claimed once due, one sample per attempt that ran.",
            ["queue"],
            buckets=DURATION_BUCKETS,
            registry=self.registry,
        )
        self.repairs = Counter(
            "durable_reconciler_repairs",
            "Runs the reconciler found in a state that must not exist, and repaired.",
            registry=self.registry,
        )
        self.queue_label = QueueLabels()
        self._gauges = _Gauges(self.queue_label)
        self.registry.register(self._gauges)
        self._server: WSGIServer | None = None
        # The labelled series, looked up once each: labels() costs more than the increment it precedes.
        self._series: dict[tuple[object, ...], Any] = {}

    # -- the engine's observer -----------------------------------------------

    def _labelled(self, metric: Any, *labels: str) -> Any:
        key = (id(metric), *labels)
        series = self._series.get(key)
        if series is None:
            series = self._series[key] = metric.labels(*labels)
        return series

    def attempt_started(self, attempt: Attempt) -> None:
        # One sample per attempt that runs: from when its run became due to the claim that took it.
        if attempt.due_since is not None:
            lag = (attempt.database_now - attempt.due_since).total_seconds()
            self._labelled(self.queue_lag, self.queue_label(attempt.run.queue)).observe(max(lag, 0.0))

    def step_executed(self, attempt: Attempt) -> None:
        self._labelled(self.steps, attempt.run.name).inc()

    def replay_diverged(self, attempt: Attempt) -> None:
        self._labelled(self.replay_divergences, attempt.run.name).inc()

    def attempt_ended(self, attempt: Attempt, outcome: str | None, seconds: float) -> None:
        function = attempt.run.name
        if outcome is None:
            self._labelled(self.attempts_lost, function).inc()
        else:
            self._labelled(self.attempts, function, outcome).inc()
        self._labelled(self.attempt_duration, function).observe(seconds)

    # -- the worker's own --------------------------------------------------------

    def track(self, pool: SlotPool) -> None:
        """Read the slots gauge from this pool."""
        self._gauges.pool = pool

    def repaired(self, count: int) -> None:
        self.repairs.inc(count)

    def serve(self, port: int, address: str) -> None:
        """Serve ``/metrics`` on (address, port) from a thread of its own.

        Raises:
            OSError: the port cannot be bound (in use, or not allowed).
        """
        self._server = metrics_http.start(address, port, self.registry)
        logger.info("serving metrics on http://%s:%d%s", address, port, metrics_http.METRICS_PATH)

    def close(self) -> None:
        """Stop serving and free the port; the metrics leave the registry."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        for collector in (
            self.attempts,
            self.attempts_lost,
            self.steps,
            self.attempt_duration,
            self.queue_lag,
            self.repairs,
            self._gauges,
        ):
            self.registry.unregister(collector)


class _Gauges(Collector):
    """``durable_worker_slots{state}`` from the pool, and ``durable_runs{status,queue}`` from the database."""

    def __init__(self, queue_label: QueueLabels) -> None:
        self.pool: SlotPool | None = None
        self._queue_label = queue_label
        self._lock = threading.Lock()
        self._runs: dict[tuple[str, str], int] = {}
        self._read_at: float | None = None

    def describe(self) -> Iterator[GaugeMetricFamily]:
        # Registering a collector without describe() would make the registry collect it (a query) at once.
        yield GaugeMetricFamily("durable_worker_slots", "This worker's slots, busy or idle.", labels=["state"])
        yield GaugeMetricFamily("durable_runs", "Runs by status and queue.", labels=["status", "queue"])

    def collect(self) -> Iterator[GaugeMetricFamily]:
        slots = GaugeMetricFamily("durable_worker_slots", "This worker's slots, busy or idle.", labels=["state"])
        if self.pool is not None:
            busy = self.pool.busy_slots()
            slots.add_metric(["busy"], busy)
            slots.add_metric(["idle"], max(self.pool.concurrency - busy, 0))
        yield slots
        runs = GaugeMetricFamily(
            "durable_runs",
            "Runs by status and queue: exact for a live status with few runs, else PostgreSQL's estimate.",
            labels=["status", "queue"],
        )
        by_label: dict[tuple[str, str], int] = {}
        for (status, queue), count in self._runs_by_status_and_queue().items():
            key = (status, self._queue_label(queue))
            by_label[key] = by_label.get(key, 0) + count
        for (status, queue), count in sorted(by_label.items()):
            runs.add_metric([status, queue], count)
        yield runs

    def _runs_by_status_and_queue(self) -> dict[tuple[str, str], int]:
        """The last reading, read again when it is older than POLL_SECONDS (on the scraping thread)."""
        with self._lock:
            now = time.monotonic()
            if self._read_at is None or now - self._read_at >= durable_settings.POLL_SECONDS:
                self._read_at = now
                try:
                    with Recovering() as failure:
                        self._runs = lifecycle.runs_by_status_and_queue()
                    if failure.error is not None:
                        logger.warning(
                            "metrics: could not read the runs by status and queue (%s); keeping the last",
                            failure.error,
                        )
                finally:
                    # Each scrape comes on a thread of its own: its connection must not outlive it.
                    connections.close_all()
            return self._runs
