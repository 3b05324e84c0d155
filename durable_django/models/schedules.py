"""Cron schedules, and the runs each one made, one per tick."""

from django.db import models
from django.db.models import Q
from django.db.models.functions import Now
from django.utils.translation import gettext_lazy as _

from ..tenancy import unscope
from .base import DurableModel


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
