"""What a run records while it runs: its journal of steps, its attempts, signals, events and streams, and
the replays that diverged from it."""

from django.db import models
from django.db.models.functions import Now
from django.utils.translation import gettext_lazy as _

from .base import DurableModel


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
