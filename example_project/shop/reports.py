"""Figures for the nightly report, read from the shop's own tables."""

from datetime import datetime, timedelta

from .models import LedgerEntry, Order


def totals(until: str, *, hours: int) -> dict:
    """Orders placed, and money charged and refunded, in the ``hours`` before ``until`` (ISO 8601).

    Returns:
        ``{"orders", "charged_cents", "refunded_cents"}``, all integers.
    """
    end = datetime.fromisoformat(until)
    window = {"created_at__gte": end - timedelta(hours=hours), "created_at__lt": end}
    charged = {
        entry.result["charge_id"]: entry.details["amount_cents"]
        for entry in LedgerEntry.objects.filter(service="payments", action="charge card", **window)
    }
    refunded = LedgerEntry.objects.filter(service="payments", action="refund", **window)
    return {
        "orders": Order.objects.filter(**window).count(),
        "charged_cents": sum(charged.values()),
        "refunded_cents": sum(charged.get(entry.details["charge_id"], 0) for entry in refunded),
    }
