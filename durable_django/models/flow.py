"""Flow control's own tables: the starts a rate counts, the leases renewed beside a locked row, the pauses."""

from django.db import models
from django.db.models import Q
from django.db.models.functions import Now
from django.utils.translation import gettext_lazy as _

from .base import DurableModel


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
