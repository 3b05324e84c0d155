"""The shop's outside world: a payment gateway, a warehouse, a carrier and a mailer.

Each fake service behaves like a real one that accepts idempotency keys (as
payment gateways do): it logs every request it receives (``ServiceCall``) and
carries the side effect out once per key (``LedgerEntry``), answering a
repeated key with the original result. Workflows call these from inside
``ctx.step`` with ``ctx.idempotency_key(step_name)``.
"""

from __future__ import annotations

import time
import uuid

from django.conf import settings

from .models import LedgerEntry, ServiceCall


def _perform(service: str, action: str, subject: str, idempotency_key: str, details: dict, make_result) -> dict:
    """Log the request, then apply the effect unless this key already did; return the effect's result."""
    if not idempotency_key:
        raise ValueError(f"{service} needs an idempotency key for {action!r}")
    ServiceCall.objects.create(service=service, action=action, subject=subject, idempotency_key=idempotency_key)
    # get_or_create survives a concurrent insert of the same key: the loser reads the winner.
    entry, _created = LedgerEntry.objects.get_or_create(
        idempotency_key=idempotency_key,
        defaults={
            "service": service,
            "action": action,
            "subject": subject,
            "details": details,
            "result": make_result(),
        },
    )
    return entry.result


def charge_card(order_id: int, amount_cents: int, *, idempotency_key: str) -> dict:
    """Charge the customer's card; the gateway answers after ``SHOP["GATEWAY_LATENCY"]`` seconds.

    Returns:
        ``{"charge_id": ..., "amount_cents": ...}``, the same for every request with this key.
    """
    result = _perform(
        "payments",
        "charge card",
        f"order {order_id}",
        idempotency_key,
        {"amount_cents": amount_cents},
        lambda: {"charge_id": f"ch_{uuid.uuid4().hex[:16]}", "amount_cents": amount_cents},
    )
    # The charge is made; the answer is slow to come back. A worker that dies
    # here has charged the card without journalling it, so the step runs again.
    time.sleep(settings.SHOP["GATEWAY_LATENCY"])
    return result


def refund(order_id: int, charge_id: str, *, idempotency_key: str) -> dict:
    """Refund a charge in full."""
    return _perform(
        "payments",
        "refund",
        f"order {order_id}",
        idempotency_key,
        {"charge_id": charge_id},
        lambda: {"refund_id": f"re_{uuid.uuid4().hex[:16]}"},
    )


def reserve_stock(order_id: int, items: list, *, idempotency_key: str) -> dict:
    """Set the order's items aside in the warehouse."""
    return _perform(
        "warehouse",
        "reserve stock",
        f"order {order_id}",
        idempotency_key,
        {"items": items},
        lambda: {"reservation": f"rs_{uuid.uuid4().hex[:12]}"},
    )


def release_stock(order_id: int, reservation: str, *, idempotency_key: str) -> dict:
    """Put reserved items back on the shelf."""
    return _perform(
        "warehouse",
        "release stock",
        f"order {order_id}",
        idempotency_key,
        {"reservation": reservation},
        lambda: {"released": reservation},
    )


def book_carrier(order_id: int, *, idempotency_key: str) -> dict:
    """Book a parcel with the carrier; the tracking number is the carrier's choice."""
    return _perform(
        "carrier",
        "book parcel",
        f"order {order_id}",
        idempotency_key,
        {},
        lambda: {"tracking": f"TRK{uuid.uuid4().int % 10**10:010d}"},
    )


def hand_over_parcel(order_id: int, tracking: str, *, idempotency_key: str) -> dict:
    """The warehouse hands the packed parcel to the carrier."""
    return _perform(
        "warehouse",
        "hand over parcel",
        f"order {order_id}",
        idempotency_key,
        {"tracking": tracking},
        lambda: {"handed_over": tracking},
    )


def send_email(to: str, template: str, subject: str, context: dict, *, idempotency_key: str) -> dict:
    """Send one email built from ``template``; ``subject`` says what it is about (e.g. "order 12")."""
    return _perform(
        "mailer",
        f"email {template}",
        subject,
        idempotency_key,
        {"to": to, "context": context},
        lambda: {"message_id": f"<{uuid.uuid4().hex}@shop.example>"},
    )
