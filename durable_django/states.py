"""Run statuses, defined once and used by models, store, admin and tasks backend."""

from django.db import models
from django.utils.translation import gettext_lazy as _


class RunStatus(models.TextChoices):
    # Waiting to be claimed: new, retrying after backoff, woken, or released.
    PENDING = "pending", _("Pending")
    # Claimed by a worker that holds a lease (leased_until) on it.
    RUNNING = "running", _("Running")
    # Suspended without a lease: sleeping, or waiting for a signal or a child.
    WAITING = "waiting", _("Waiting")
    # Finished: the handler returned; output holds its value.
    SUCCEEDED = "succeeded", _("Succeeded")
    # Finished: the retry budget or MAX_RECOVERIES ran out, or its deadline passed; error holds why.
    FAILED = "failed", _("Failed")
    # Finished: cancelled before it could finish.
    CANCELLED = "cancelled", _("Cancelled")


# A run's priority range (Django Tasks' own): higher is claimed first.
MIN_PRIORITY, MAX_PRIORITY = -100, 100

# Constraint names, shared by the models (which declare them) and the store (which maps violations by name).
IDEMPOTENCY_CONSTRAINT = "durable_run_idempotency_key_key"
COALESCE_CONSTRAINT = "durable_run_coalesce_key_pending"
DEBOUNCE_CONSTRAINT = "durable_run_debounce_key_pending"
PRIORITY_CONSTRAINT = "durable_run_priority_range"

LIVE_STATUSES = frozenset({RunStatus.PENDING, RunStatus.RUNNING, RunStatus.WAITING})
TERMINAL_STATUSES = frozenset({RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED})

# Which status may follow which; the store's statements implement exactly these.
ALLOWED_TRANSITIONS = {
    RunStatus.PENDING: {RunStatus.RUNNING, RunStatus.CANCELLED, RunStatus.FAILED},  # failed: its deadline passed
    RunStatus.RUNNING: {
        RunStatus.PENDING,  # retry after a failure, or released at shutdown
        RunStatus.RUNNING,  # reclaimed after its lease expired
        RunStatus.WAITING,
        RunStatus.SUCCEEDED,
        RunStatus.FAILED,
        RunStatus.CANCELLED,
    },
    RunStatus.WAITING: {RunStatus.PENDING, RunStatus.RUNNING, RunStatus.CANCELLED, RunStatus.FAILED},
    RunStatus.SUCCEEDED: set(),
    RunStatus.FAILED: {RunStatus.PENDING},  # resume()
    RunStatus.CANCELLED: {RunStatus.PENDING},  # resume()
}


class CancelOutcome(models.TextChoices):
    # The run was pending or waiting and is now cancelled.
    CANCELLED = "cancelled", _("Cancelled")
    # The run is running; it ends cancelled at its next context call or heartbeat.
    REQUESTED = "requested", _("Requested")
    # The run had finished, or is past a pivot step; nothing changed.
    REFUSED = "refused", _("Refused")
