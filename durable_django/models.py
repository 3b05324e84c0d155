"""The durable tables: fields, constraints and indexes, and a manager that only reads.

Only the store writes these tables, with its own SQL; the admin reads them
through these models. Writing through a model (create, save, update, delete)
raises ``ReadOnlyRecord``: every change goes through the client API, so its
rules (fences, cascades, NOTIFY) always apply. Index definitions follow the
seed schema (compare definitions, not names); the partial indexes beyond it
serve the claim's own order, the cascades and the reconciler.
"""

from typing import Any, NoReturn, TypeVar

from django.db import models
from django.db.models import F, Q
from django.db.models.functions import Now
from django.utils.translation import gettext_lazy as _

from .exceptions import ReadOnlyRecord
from .states import (
    COALESCE_CONSTRAINT,
    DEBOUNCE_CONSTRAINT,
    IDEMPOTENCY_CONSTRAINT,
    MAX_PRIORITY,
    MIN_PRIORITY,
    PRIORITY_CONSTRAINT,
    RunStatus,
)
from .tenancy import unscope

_M = TypeVar("_M", bound=models.Model)


def _refuse(*args: Any, **kwargs: Any) -> NoReturn:
    raise ReadOnlyRecord()


class ReadOnlyQuerySet(models.QuerySet[_M]):
    """A queryset that reads; every write raises ReadOnlyRecord."""

    create = get_or_create = update_or_create = bulk_create = bulk_update = update = delete = _refuse


class DurableModel(models.Model):
    """A durable table's model: read through it, never write through it."""

    objects = ReadOnlyQuerySet.as_manager()

    class Meta:
        abstract = True

    def save(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise ReadOnlyRecord()

    def delete(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise ReadOnlyRecord()


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
            models.UniqueConstraint(fields=["idempotency_key"], name=IDEMPOTENCY_CONSTRAINT),
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


class RateStart(DurableModel):
    """The attempt starts one admission counted against a rate key, kept while they fall inside its window.

    ``total`` is the key's running count of starts (this row's included), written under the key's lock, so
    the starts in a window are two index probes (its newest row and its oldest row in the window), not a
    count of every start in it.
    """

    id = models.BigAutoField(primary_key=True)
    # The limit's key, as Run.held_by shows it: "rate:crm.sync", "rate:queue:emails".
    key = models.TextField()
    started_at = models.DateTimeField(db_default=Now())
    # When it leaves its window: the reconciler deletes starts past this.
    expires_at = models.DateTimeField()
    # How many attempts started at started_at, and the key's starts up to and including them.
    starts = models.IntegerField(db_default=1)
    total = models.BigIntegerField()

    class Meta:
        db_table = "durable_rate_start"
        verbose_name = _("rate-limited start")
        verbose_name_plural = _("rate-limited starts")
        indexes = [
            models.Index(fields=["key", "started_at"], name="durable_rate_start_window"),
            models.Index(fields=["expires_at"], name="durable_rate_start_expiry"),
        ]

    def __str__(self) -> str:
        return f"{self.key}: {self.starts} at {self.started_at}"


class LeaseRenewal(DurableModel):
    """A lease its holder renewed while another transaction held the run's row lock (store/leases.py).

    A client call that writes a running run (a signal, a cancel) keeps the row locked until its caller
    commits; the heartbeat cannot update the row meanwhile, so it renews the lease here, and a claim
    counts the later of the two. The row goes once the heartbeat renews the run's own lease again.
    """

    run_id = models.TextField(primary_key=True)
    # The fence token of the attempt that holds the lease: a renewal of another attempt counts nothing.
    token = models.IntegerField()
    leased_until = models.DateTimeField()

    class Meta:
        db_table = "durable_lease_renewal"
        verbose_name = _("lease renewal")
        verbose_name_plural = _("lease renewals")

    def __str__(self) -> str:
        return f"{self.run_id} attempt {self.token} until {self.leased_until}"


class Pause(DurableModel):
    """A paused function or queue: its due runs are held (``Run.held_by`` is this key) until it is unpaused."""

    # "paused:function:{name}" or "paused:queue:{queue}": what Run.held_by shows.
    key = models.TextField(_("key"), primary_key=True)
    function = models.TextField(_("function"), null=True, blank=True)
    queue = models.TextField(_("queue"), null=True, blank=True)
    reason = models.TextField(_("reason"), blank=True, db_default="")
    created_at = models.DateTimeField(_("created at"), db_default=Now())

    class Meta:
        db_table = "durable_pause"
        verbose_name = _("pause")
        verbose_name_plural = _("pauses")
        constraints = [
            models.CheckConstraint(
                condition=Q(function__isnull=True, queue__isnull=False) | Q(function__isnull=False, queue__isnull=True),
                name="durable_pause_one_target",
            ),
        ]

    def __str__(self) -> str:
        return self.key


class Step(DurableModel):
    """The journal: one row per completed step, sleep, wait or spawn of a run."""

    pk = models.CompositePrimaryKey("run_id", "step_id")
    run_id = models.TextField()
    # "v{version}:{name}:{occurrence}"
    step_id = models.TextField()
    result = models.JSONField()
    tenant_id = models.UUIDField(null=True, blank=True)
    created_at = models.DateTimeField(db_default=Now())
    # When an executed step's fn started and how long it ran (NULL for sleeps, waits and spawns).
    started_at = models.DateTimeField(null=True, blank=True)
    duration = models.DurationField(null=True, blank=True)

    class Meta:
        db_table = "durable_step"
        verbose_name = _("step")
        verbose_name_plural = _("steps")

    def __str__(self) -> str:
        return f"{self.run_id} {self.step_id}"


class Attempt(DurableModel):
    """One claim of a run, written by the statement that ended it (migration 0017's trigger)."""

    pk = models.CompositePrimaryKey("run_id", "number")
    run_id = models.TextField()
    # The fence token of the claim.
    number = models.IntegerField()
    worker_id = models.TextField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField()
    # succeeded, failed, retrying, suspended, cancelled, timed_out, lost or released.
    outcome = models.TextField()
    error = models.TextField(null=True, blank=True)
    error_type = models.TextField(null=True, blank=True)
    # What a suspended attempt left its run waiting for ("sleep", "signal:...", "child:...").
    waited_for = models.TextField(null=True, blank=True)

    class Meta:
        db_table = "durable_attempt"
        verbose_name = _("attempt")
        verbose_name_plural = _("attempts")

    def __str__(self) -> str:
        return f"{self.run_id} #{self.number} {self.outcome}"


class Signal(DurableModel):
    """Signals, kept from the moment they are emitted, before or after their wait."""

    pk = models.CompositePrimaryKey("run_id", "signal", "occurrence")
    run_id = models.TextField()
    signal = models.TextField()
    occurrence = models.IntegerField()
    value = models.JSONField()
    tenant_id = models.UUIDField(null=True, blank=True)
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        db_table = "durable_signal"
        verbose_name = _("signal")
        verbose_name_plural = _("signals")

    def __str__(self) -> str:
        return f"{self.run_id} {self.signal}#{self.occurrence}"


class Event(DurableModel):
    """A run's published values (``ctx.set_event``): one row per key, the latest write kept."""

    pk = models.CompositePrimaryKey("run_id", "key")
    run_id = models.TextField()
    key = models.TextField()
    value = models.JSONField()
    # The attempt (fence token) that wrote the value.
    attempt = models.IntegerField()
    # How many writes of this key the handler's body has committed: a replay's writes below it are skipped.
    body_writes = models.IntegerField(db_default=0)
    tenant_id = models.UUIDField(null=True, blank=True)
    updated_at = models.DateTimeField(db_default=Now())

    class Meta:
        db_table = "durable_event"
        verbose_name = _("event")
        verbose_name_plural = _("events")

    def __str__(self) -> str:
        return f"{self.run_id} {self.key}"


class Stream(DurableModel):
    """A run's stream (``ctx.write_stream``): the next offset to give, and whether it is closed."""

    pk = models.CompositePrimaryKey("run_id", "key")
    run_id = models.TextField()
    key = models.TextField()
    next_offset = models.IntegerField(db_default=0)
    # As on Event: the body's committed writes, so a replay writes none of them again.
    body_writes = models.IntegerField(db_default=0)
    closed_at = models.DateTimeField(null=True, blank=True)
    tenant_id = models.UUIDField(null=True, blank=True)
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        db_table = "durable_stream"
        verbose_name = _("stream")
        verbose_name_plural = _("streams")

    def __str__(self) -> str:
        return f"{self.run_id} {self.key}"


class StreamItem(DurableModel):
    """One item of a run's stream, at its offset (0, 1, 2, ... per stream, in commit order)."""

    pk = models.CompositePrimaryKey("run_id", "key", "offset")
    run_id = models.TextField()
    key = models.TextField()
    offset = models.IntegerField(db_column="item_offset")
    value = models.JSONField()
    attempt = models.IntegerField()
    written_at = models.DateTimeField(db_default=Now())
    tenant_id = models.UUIDField(null=True, blank=True)

    class Meta:
        db_table = "durable_stream_item"
        verbose_name = _("stream item")
        verbose_name_plural = _("stream items")

    def __str__(self) -> str:
        return f"{self.run_id} {self.key}#{self.offset}"


class Schedule(DurableModel):
    schedule_id = models.TextField(primary_key=True)
    name = models.TextField(_("name"))
    cron = models.TextField(_("cron"))
    tz = models.TextField(null=True, blank=True)
    input = models.JSONField(null=True, blank=True)
    next_fire_at = models.DateTimeField()
    enabled = models.BooleanField(_("enabled"), db_default=True)
    tenant_id = models.UUIDField(null=True, blank=True)
    # Where the schedule came from: "api" or "settings" (synced at worker start).
    source = models.TextField(_("source"), db_default="api")
    last_fired_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(db_default=Now())
    updated_at = models.DateTimeField(db_default=Now())
    # What a tick does while a run of the schedule is live: allow_all, skip, buffer_one, cancel_previous.
    overlap = models.TextField(_("overlap"), db_default="allow_all")
    # After downtime, the ticks missed within this window each fire; None: one owed fire.
    catchup_window = models.DurationField(null=True, blank=True)
    # Each tick's run is due at a random instant within this after the tick.
    jitter = models.DurationField(null=True, blank=True)
    pause_on_failure = models.BooleanField(db_default=False)
    # Why the schedule disabled itself (a failed run, with pause_on_failure); cleared when it is enabled.
    paused_reason = models.TextField(null=True, blank=True)
    # buffer_one: the tick that waits for the schedule's live run to end.
    buffered_tick = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "durable_schedule"
        verbose_name = _("schedule")
        verbose_name_plural = _("schedules")
        permissions = [("fire_schedule", "Can fire durable schedules now")]
        indexes = [
            models.Index(fields=["next_fire_at"], condition=Q(enabled=True), name="durable_schedule_due"),
            models.Index(
                fields=["tenant_id", "next_fire_at"], condition=Q(enabled=True), name="durable_schedule_tenant_due"
            ),
            models.Index(
                fields=["buffered_tick"],
                condition=Q(enabled=True, buffered_tick__isnull=False),
                name="durable_schedule_buffered",
            ),
        ]
        constraints = [
            models.CheckConstraint(
                condition=Q(overlap__in=["allow_all", "skip", "buffer_one", "cancel_previous"]),
                name="durable_schedule_overlap_known",
            )
        ]

    def __str__(self) -> str:
        # The id as it was passed: the stored tenant prefix (":" alone for the untagged) is no part of it.
        return f"{unscope(self.schedule_id)} ({self.cron})"


class ReplayDivergence(DurableModel):
    """An attempt whose replay executed a step while the journal held steps it never asked for: the code
    changed under the run. The run's page marks it."""

    id = models.BigAutoField(primary_key=True)
    run_id = models.TextField(db_index=True)
    # The attempt's fence token.
    attempt = models.IntegerField()
    # The step it executed, and (some of) the journalled step ids it never asked for.
    step_id = models.TextField()
    unasked = models.JSONField(default=list)
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        db_table = "durable_replay_divergence"
        verbose_name = _("replay divergence")
        verbose_name_plural = _("replay divergences")

    def __str__(self) -> str:
        return f"{self.run_id} #{self.attempt} at {self.step_id}"


class ScheduleRun(DurableModel):
    """A run a schedule made (at a tick, by a backfill, or fired by hand): its last runs, its overlap,
    and its pause on failure read these. ``outcome`` is set once the run has ended and been looked at."""

    id = models.BigAutoField(primary_key=True)
    # The schedule's stored (tenant-scoped) id; no foreign key, so firing never locks against a delete.
    schedule_id = models.TextField()
    # The tick it was made for; None for a run fired by hand.
    tick = models.DateTimeField(null=True, blank=True)
    run_id = models.TextField()
    created_at = models.DateTimeField(db_default=Now())
    # The run's terminal status once the scheduler has seen it end ("purged" if it vanished first).
    outcome = models.TextField(null=True, blank=True)

    class Meta:
        db_table = "durable_schedule_run"
        verbose_name = _("schedule run")
        verbose_name_plural = _("schedule runs")
        constraints = [models.UniqueConstraint(fields=["schedule_id", "tick"], name="durable_schedule_run_tick")]
        indexes = [
            models.Index(fields=["schedule_id", "-id"], name="durable_schedule_run_recent"),
            models.Index(fields=["run_id"], name="durable_schedule_run_run"),
            models.Index(fields=["schedule_id"], condition=Q(outcome__isnull=True), name="durable_schedule_run_open"),
        ]

    def __str__(self) -> str:
        return f"{self.schedule_id} -> {self.run_id}"


class Worker(DurableModel):
    """A worker process as it records itself: written at start, refreshed with its heartbeat, marked at a
    graceful stop. One that is killed stops being seen and ages out."""

    worker_id = models.TextField(_("worker id"), primary_key=True)
    host = models.TextField(_("host"))
    pid = models.IntegerField(_("pid"))
    # The queues it claims from; None: every queue.
    queues = models.JSONField(null=True, blank=True)
    # The functions it registers: {name: [versions]}.
    functions = models.JSONField(default=dict)
    # The one tenant whose runs it claims; None: every tenant.
    tenant_id = models.UUIDField(null=True, blank=True)
    concurrency = models.IntegerField(_("concurrency"))
    started_at = models.DateTimeField(db_default=Now())
    last_seen_at = models.DateTimeField(db_default=Now())
    stopped_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "durable_worker"
        verbose_name = _("worker")
        verbose_name_plural = _("workers")

    def __str__(self) -> str:
        return self.worker_id
