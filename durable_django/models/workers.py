"""The live worker processes, each recorded at start, with every heartbeat and at a graceful stop."""

from django.db import models
from django.db.models.functions import Now
from django.utils.translation import gettext_lazy as _

from .base import DurableModel


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
