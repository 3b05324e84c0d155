"""The durable tables: fields, constraints and indexes, and a manager that only reads.

Only the store writes these tables, with its own SQL; the admin reads them
through these models. Writing through a model (create, save, update, delete)
raises ``ReadOnlyRecord``: every change goes through the client API, so its
rules (fences, cascades, NOTIFY) always apply. Index definitions follow the
seed schema (compare definitions, not names); the partial indexes beyond it
serve the claim's own order, the cascades and the reconciler.

One module per group of tables: ``runs``; the journal and what a run records
while it runs (``journal``); flow control's own tables (``flow``);
``schedules``; ``workers``.
"""

from .base import DurableModel, ReadOnlyQuerySet
from .flow import LeaseRenewal, Pause, RateStart
from .journal import Attempt, Event, ReplayDivergence, Signal, Step, Stream, StreamItem
from .runs import Run
from .schedules import Schedule, ScheduleRun
from .workers import Worker

__all__ = [
    "Attempt",
    "DurableModel",
    "Event",
    "LeaseRenewal",
    "Pause",
    "RateStart",
    "ReadOnlyQuerySet",
    "ReplayDivergence",
    "Run",
    "Schedule",
    "ScheduleRun",
    "Signal",
    "Step",
    "Stream",
    "StreamItem",
    "Worker",
]
