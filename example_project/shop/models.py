"""The shop's tables: orders, and two records of what the outside world saw.

``ServiceCall`` and ``LedgerEntry`` are written by the fake services in
``outside.py``; together they show what durable execution guarantees: a step
the journal replays sends no request, and a request repeated after a crash
carries the same idempotency key and changes nothing.
"""

from django.db import models


class Order(models.Model):
    """An order placed by a customer; its fulfilment is a durable run."""

    email = models.EmailField()
    # [{"sku": "...", "quantity": n}, ...]
    items = models.JSONField()
    total_cents = models.PositiveIntegerField()
    # The durable run that fulfils the order, and the Django task that confirms it.
    fulfilment_run_id = models.TextField(blank=True)
    confirmation_task_id = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "shop_order"
        ordering = ["-created_at"]

    def __str__(self):
        return f"order {self.pk}"


class ServiceCall(models.Model):
    """Every request a service received, repeats included: a step that ran twice shows here twice."""

    service = models.TextField()
    action = models.TextField()
    # What the call is about, e.g. "order 12" or "report 2025-06-01".
    subject = models.TextField()
    idempotency_key = models.TextField()
    received_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "shop_service_call"
        ordering = ["received_at"]
        indexes = [models.Index(fields=["subject", "action"], name="shop_service_call_subject")]

    def __str__(self):
        return f"{self.service}: {self.action} for {self.subject}"


class LedgerEntry(models.Model):
    """One row per side effect a service carried out: a card charged, a parcel booked, an email sent.

    The unique idempotency key is the service's own dedup: a repeated request
    returns the stored result and adds no row.
    """

    service = models.TextField()
    action = models.TextField()
    subject = models.TextField()
    idempotency_key = models.TextField(unique=True)
    details = models.JSONField(default=dict)
    result = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "shop_ledger"
        ordering = ["created_at"]
        verbose_name_plural = "ledger entries"
        indexes = [models.Index(fields=["subject", "action"], name="shop_ledger_subject")]

    def __str__(self):
        return f"{self.service}: {self.action} for {self.subject}"
