"""The run table: one durable run, its claim, lease, limits and fork origin, and the indexes its readers use."""

from django.db import models
from django.db.models import F, Q
from django.db.models.functions import Now
from django.utils.translation import gettext_lazy as _

from ..states import (
    COALESCE_CONSTRAINT,
    DEBOUNCE_CONSTRAINT,
    IDEMPOTENCY_CONSTRAINT,
    MAX_PRIORITY,
    MIN_PRIORITY,
    PRIORITY_CONSTRAINT,
    RunStatus,
)
from .base import DurableModel


class Run(DurableModel):
    run_id = models.TextField(_("run id"), primary_key=True)
    name = models.TextField()
    version = models.IntegerField(db_default=1)
    status = models.TextField(_("status"), choices=RunStatus.choices)
    idempotency_key = models.TextField(null=True, blank=True)
    coalesce_key = models.TextField(null=True, blank=True)
    input = models.JSONField(null=True, blank=True)
    output = models.JSONField(null=True, blank=True)
    error = models.TextField(null=True, blank=True)
    # Dotted path of the exception class that failed the run.
    error_type = models.TextField(null=True, blank=True)
    tenant_id = models.UUIDField(null=True, blank=True)
    # Claims so far: the fence token every worker write carries.
    attempts = models.IntegerField(db_default=0)
    # Failed attempts: what the retry budget counts.
    failures = models.IntegerField(db_default=0)
    # Reclaims after an expired lease: what MAX_RECOVERIES counts.
    recoveries = models.IntegerField(db_default=0)
    retry_policy = models.JSONField(default=dict)
    queue = models.TextField(db_default="default")
    priority = models.IntegerField(db_default=0)
    parent_run_id = models.TextField(null=True, blank=True)
    # Set when the run spawns its first child: a run without children or parent lands
    # with a plain fenced UPDATE, without the parent wake-up and cascade.
    has_children = models.BooleanField(db_default=False)
    # Set when a pivot step is journalled: from then on every cancel is refused.
    pivoted_at = models.DateTimeField(null=True, blank=True)
    # What a waiting run waits for: "sleep", "signal:<name>:<occurrence>" or "child:<run_id>".
    waiting_for = models.TextField(null=True, blank=True)
    leased_until = models.DateTimeField(null=True, blank=True)
    available_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    # When the current claim's attempt started; NULL while a claimed run waits for a free slot.
    attempt_started_at = models.DateTimeField(null=True, blank=True)
    claimed_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    worker_id = models.TextField(_("worker id"), null=True, blank=True)
    created_at = models.DateTimeField(_("created at"), db_default=Now())
    updated_at = models.DateTimeField(db_default=Now())
    cancel_requested_at = models.DateTimeField(null=True, blank=True)
    cancel_refused_at = models.DateTimeField(null=True, blank=True)
    # Flow control, computed from the input at enqueue: the function's concurrency key and limit
    # (and whether a run that started counts until it finishes), its rate key, limit and window.
    concurrency_key = models.TextField(null=True, blank=True)
    concurrency_limit = models.IntegerField(null=True, blank=True)
    concurrency_while_waiting = models.BooleanField(db_default=False)
    rate_key = models.TextField(null=True, blank=True)
    rate_limit = models.IntegerField(null=True, blank=True)
    rate_per = models.FloatField(null=True, blank=True)
    # Which limit holds this due pending run back ("concurrency:crm.sync:42", "rate:queue:emails"), or NULL.
    # A held run leaves the claim index: the claim never scans it.
    held_by = models.TextField(null=True, blank=True)
    # Debounce: the key a burst of submits shares (tenant-scoped), and the latest start max_wait allows.
    debounce_key = models.TextField(null=True, blank=True)
    debounce_until = models.DateTimeField(null=True, blank=True)
    # A run not finished by this instant ends failed with DeadlineExceeded; a child's is never later
    # than its parent's. resume() clears it.
    deadline = models.DateTimeField(null=True, blank=True)
    # Fan-in (wait_for_all, wait_for_any): on a child, the parent's fence token when it began a wait
    # that includes this child; a landing counts for the parent only while the token is still its own.
    awaited_token = models.IntegerField(null=True, blank=True)
    # Fan-in, on a parent whose waiting_for is "children:all" or "children:any": how many awaited
    # children must still land before it wakes (meaningless otherwise).
    awaiting_children = models.IntegerField(null=True, blank=True)
    # What the handler last reported with ctx.set_progress() (not journalled; the latest write wins).
    progress = models.JSONField(null=True, blank=True)
    # The W3C trace context of the code that enqueued the run: its attempts' spans join that trace.
    trace_context = models.JSONField(null=True, blank=True)
    # When its last allowed attempt failed and its policy parked it for an operator (waiting_for "operator").
    parked_at = models.DateTimeField(null=True, blank=True)
    # A fork's origin: {"run_id": ..., "step": ...} (step None: the whole journal was copied), or NULL.
    forked_from = models.JSONField(null=True, blank=True)

    class Meta:
        db_table = "durable_run"
        verbose_name = _("run")
        verbose_name_plural = _("runs")
        permissions = [
            ("cancel_run", "Can cancel durable runs"),
            ("retry_run", "Can resume and retry durable runs"),
            ("signal_run", "Can emit signals to durable runs"),
            ("pause_run", "Can pause and unpause durable functions and queues"),
            ("fork_run", "Can fork durable runs"),
            ("resume_run_on_version", "Can resume durable runs on another version"),
        ]
        constraints = [
            # Partial: most runs have no key, and an index entry of a NULL key was written at each of a
            # run's writes that changed its row's place (its claim, start and landing) for nothing.
            models.UniqueConstraint(
                fields=["idempotency_key"], condition=Q(idempotency_key__isnull=False), name=IDEMPOTENCY_CONSTRAINT
            ),
            models.UniqueConstraint(
                fields=["coalesce_key"],
                condition=Q(status=RunStatus.PENDING, attempts=0),
                name=COALESCE_CONSTRAINT,
            ),
            # One unclaimed pending run per debounce key: later submits move it instead of adding one.
            models.UniqueConstraint(
                fields=["debounce_key"],
                condition=Q(status=RunStatus.PENDING, attempts=0),
                name=DEBOUNCE_CONSTRAINT,
            ),
            models.CheckConstraint(
                condition=Q(priority__gte=MIN_PRIORITY, priority__lte=MAX_PRIORITY),
                name=PRIORITY_CONSTRAINT,
            ),
        ]
        indexes = [
            # The seed's recovery scan and its tenant-bound twin.
            models.Index(fields=["status", "name", "created_at"], name="durable_run_status_name"),
            models.Index(fields=["tenant_id", "status", "name", "created_at"], name="durable_run_tenant_status"),
            # The seed's purge index: finished runs by landing time.
            models.Index(fields=["status", "updated_at"], name="durable_run_purge"),
            # The seed's listing indexes: newest first (read backward), keyset on (created_at, run_id). They are
            # ascending, so each new run lands on the rightmost page and splits leave full pages (a descending
            # index grows at its leftmost page, half-empty pages, twice the size). The first carries the
            # status, so the overview counts the newest runs by status from the index alone.
            models.Index(fields=["created_at", "run_id"], name="durable_run_listing", include=["status"]),
            models.Index(fields=["tenant_id", "created_at", "run_id"], name="durable_run_tenant_listing"),
            # The listing filtered by status: the listing index would read every newer run of another status
            # first (a million pending runs before the first failed one).
            models.Index(fields=["status", "created_at", "run_id"], name="durable_run_status_listing"),
            # The listing filtered by function: no other index leads with the name, so the filter read the
            # listing index past every newer run of the other functions (the whole table for a rare one).
            models.Index(fields=["name", "created_at", "run_id"], name="durable_run_name_listing"),
            # The claim reads pending runs in its own order (priority, then age);
            # the seed's (status, name, created_at) cannot order a claim over many names.
            models.Index(
                F("priority").desc(),
                "created_at",
                condition=Q(status=RunStatus.PENDING, held_by__isnull=True),
                name="durable_run_claim_pending",
            ),
            # The same order per queue and per tenant, for workers bound to queues or a tenant (store/claims.py):
            # the claim index alone would make them read past every run of what they do not serve.
            models.Index(
                "queue",
                F("priority").desc(),
                "created_at",
                condition=Q(status=RunStatus.PENDING, held_by__isnull=True),
                name="durable_run_claim_queue",
            ),
            models.Index(
                "tenant_id",
                F("priority").desc(),
                "created_at",
                condition=Q(status=RunStatus.PENDING, held_by__isnull=True, tenant_id__isnull=False),
                name="durable_run_claim_tenant",
            ),
            # Runs a limit holds back, by reason in claim order: freeing a slot releases the first of them.
            models.Index(
                "held_by",
                F("priority").desc(),
                "created_at",
                condition=Q(status=RunStatus.PENDING, held_by__isnull=False),
                name="durable_run_held",
            ),
            # A function key's due runs not yet held: when the key is saturated they are all held at once.
            models.Index(
                "concurrency_key",
                F("priority").desc(),
                "created_at",
                condition=Q(status=RunStatus.PENDING, held_by__isnull=True, concurrency_key__isnull=False),
                name="durable_run_key_due",
            ),
            # A rate key's due runs not yet held: when its window is full they are all held at once,
            # each until the window has room for it.
            models.Index(
                "rate_key",
                F("priority").desc(),
                "created_at",
                condition=Q(status=RunStatus.PENDING, held_by__isnull=True, rate_key__isnull=False),
                name="durable_run_rate_due",
            ),
            # The runs that hold a slot of a function's concurrency key: running, or (while_waiting)
            # started and not finished. Counting them is one short index scan per key.
            models.Index(
                fields=["concurrency_key"],
                condition=Q(concurrency_key__isnull=False)
                & (
                    Q(status=RunStatus.RUNNING)
                    | Q(
                        concurrency_while_waiting=True,
                        started_at__isnull=False,
                        status__in=[RunStatus.PENDING, RunStatus.WAITING],
                    )
                ),
                name="durable_run_slot_holders",
            ),
            # An idle worker's next wake-up: the earliest delayed pending run (retries, delays).
            models.Index(
                fields=["available_at"],
                condition=Q(status=RunStatus.PENDING, available_at__isnull=False),
                name="durable_run_delayed",
            ),
            # Sleeps and waits whose deadline passed, and leases that expired.
            models.Index(fields=["available_at"], condition=Q(status=RunStatus.WAITING), name="durable_run_due_waits"),
            # The reconciler walks every waiting run in id order, a bounded chunk per pass.
            models.Index(fields=["run_id"], condition=Q(status=RunStatus.WAITING), name="durable_run_waiting"),
            models.Index(fields=["leased_until"], condition=Q(status=RunStatus.RUNNING), name="durable_run_leases"),
            # Live runs with a deadline, soonest first: every worker fails those whose deadline passed.
            models.Index(
                fields=["deadline"],
                condition=Q(
                    deadline__isnull=False, status__in=[RunStatus.PENDING, RunStatus.RUNNING, RunStatus.WAITING]
                ),
                name="durable_run_deadlines",
            ),
            # Cascades and purge walk a run's children; the reconciler walks all children in this order.
            models.Index(
                fields=["parent_run_id", "run_id"],
                condition=Q(parent_run_id__isnull=False),
                name="durable_run_children",
            ),
            # The admin finds runs by coalesce key after they were claimed too (the unique index
            # above holds only unclaimed pending runs).
            models.Index(
                fields=["coalesce_key"], condition=Q(coalesce_key__isnull=False), name="durable_run_coalesce_key"
            ),
            # Search by input (list_runs(input_contains=...), the admin's input.a.b=value) is served by the GIN
            # index durable_run_input, made in SQL by migration 0020: declared here it would make Django 6.1
            # ask for django.contrib.postgres in INSTALLED_APPS (postgres.E005).
            # Health and the workers page: which (function, version) pairs have pending runs, and since when
            # each pair's oldest is due, in a few probes per pair whatever the table holds.
            models.Index(
                fields=["name", "version", "available_at", "updated_at"],
                condition=Q(status=RunStatus.PENDING),
                name="durable_run_pending_versions",
            ),
            # Parked runs, for the health check's count and the admin's filter.
            models.Index(
                fields=["parked_at"],
                condition=Q(status=RunStatus.WAITING, parked_at__isnull=False),
                name="durable_run_parked",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} v{self.version} [{self.status}] {self.run_id}"
