"""What the shop's views, admin and scripts call: place, decide on and cancel orders."""

from __future__ import annotations

from django.db import transaction

from durable_django import CancelOutcome, cancel, emit_signal, enqueue

from .models import Order
from .tasks import send_order_confirmation

# Prices in cents of the little catalogue the demo orders from.
CATALOGUE = {"mug": 1200, "tee": 2500, "poster": 900, "tote": 1500}


def place_order(email: str, items: list[dict], *, start_in: float | None = None) -> Order:
    """Create an order and start its fulfilment run and its confirmation task, atomically.

    The order row, the durable run and the task commit together or not at all:
    durable_django's ``enqueue`` (which the Tasks backend calls too) writes in
    the caller's transaction, and workers are woken only on commit.

    Args:
        email: the customer's address.
        items: ``[{"sku": ..., "quantity": n}, ...]`` from ``CATALOGUE``.
        start_in: seconds before fulfilment may start (a pre-order); now when None.

    Returns:
        The order, with the ids of its run and task filled in.
    """
    total = sum(CATALOGUE[item["sku"]] * item["quantity"] for item in items)
    with transaction.atomic():
        order = Order.objects.create(email=email, items=items, total_cents=total)
        run = enqueue(
            "shop.fulfil_order",
            {"order_id": order.pk, "email": email, "items": items, "total_cents": total},
            idempotency_key=f"order-{order.pk}",
            delay=start_in,
        )
        confirmation = send_order_confirmation.enqueue(order.pk)
        order.fulfilment_run_id = run.run_id
        order.confirmation_task_id = confirmation.id
        order.save(update_fields=["fulfilment_run_id", "confirmation_task_id"])
    return order


def decide(order: Order, *, approved: bool, by: str):
    """Deliver a person's decision to the order's run (kept if the run is not waiting yet).

    Returns:
        The decision the run will see: the first one delivered wins.
    """
    return emit_signal(order.fulfilment_run_id, "approval", {"approved": approved, "by": by})


def cancel_order(order: Order) -> CancelOutcome:
    """Cancel the order's fulfilment run (and any shipping child it started)."""
    return cancel(order.fulfilment_run_id)
