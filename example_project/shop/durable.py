"""The shop's durable functions, registered when durable_django autodiscovers this module.

Every call to the outside world sits inside ``ctx.step`` and passes the step's
``ctx.idempotency_key``: a replay returns the journalled answer without a
request, and a step cut off by a crash repeats its request under the same key,
which the service recognises. Everything outside a step runs again on every
replay, so it only computes from the input and from step results.
"""

import time
from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from durable_django import RetryPolicy, durable_function

from . import outside, reports


class ShippingFailed(Exception):
    """The shipping child run did not succeed; a person has to look at the order."""


@durable_function("shop.fulfil_order", version=1, retry=RetryPolicy(max_attempts=5, initial_delay=2.0))
def fulfil_order(ctx, order):
    """Reserve stock, charge the card, wait for approval, ship through a child run, follow up.

    Args:
        ctx: the durable context.
        order: ``{"order_id", "email", "items", "total_cents"}``.

    Returns:
        What happened to the order: ``outcome`` is "shipped", "rejected" or "approval timed out".
    """
    order_id = order["order_id"]

    def key(step):
        return ctx.idempotency_key(step)

    reservation = ctx.step(
        "reserve-stock", lambda: outside.reserve_stock(order_id, order["items"], idempotency_key=key("reserve-stock"))
    )
    charge = ctx.step(
        "charge-card", lambda: outside.charge_card(order_id, order["total_cents"], idempotency_key=key("charge-card"))
    )

    # The run holds no worker while a person decides; after the timeout the value is None.
    decision = ctx.wait_for_signal(
        "await-approval", "approval", timeout=timedelta(seconds=settings.SHOP["APPROVAL_TIMEOUT"])
    )
    if not (decision and decision.get("approved")):
        outcome = "rejected" if decision else "approval timed out"
        ctx.step("refund", lambda: outside.refund(order_id, charge["charge_id"], idempotency_key=key("refund")))
        ctx.step(
            "release-stock",
            lambda: outside.release_stock(order_id, reservation["reservation"], idempotency_key=key("release-stock")),
        )
        ctx.step(
            "email-cancellation",
            lambda: outside.send_email(
                order["email"],
                "order-cancelled",
                f"order {order_id}",
                {"reason": outcome},
                idempotency_key=key("email-cancellation"),
            ),
        )
        return {"order_id": order_id, "outcome": outcome}

    # spawn() is journalled: a replay finds the same child instead of starting a second one.
    shipping = ctx.spawn("spawn-shipping", "shop.ship_order", {"order_id": order_id})
    shipment = ctx.wait_for_result("await-shipping", shipping, timeout=timedelta(days=7))
    if shipment["state"] != "succeeded":
        raise ShippingFailed(f"shipping of order {order_id} ended {shipment['state']}: {shipment['error']}")
    tracking = shipment["result"]["tracking"]

    ctx.sleep_for("pause-before-follow-up", timedelta(seconds=settings.SHOP["FOLLOW_UP_DELAY"]))
    ctx.step(
        "email-follow-up",
        lambda: outside.send_email(
            order["email"],
            "how-was-your-order",
            f"order {order_id}",
            {"tracking": tracking},
            idempotency_key=key("email-follow-up"),
        ),
    )
    return {"order_id": order_id, "outcome": "shipped", "charge_id": charge["charge_id"], "tracking": tracking}


@durable_function("shop.ship_order", version=1)
def ship_order(ctx, shipment):
    """Book a parcel and hand it to the carrier; a child run of ``shop.fulfil_order``.

    Returns:
        ``{"tracking": ...}``, which the parent's ``ctx.wait_for_result`` receives.
    """
    order_id = shipment["order_id"]
    booking = ctx.step(
        "book-parcel", lambda: outside.book_carrier(order_id, idempotency_key=ctx.idempotency_key("book-parcel"))
    )
    ctx.step(
        "hand-over-parcel",
        lambda: outside.hand_over_parcel(
            order_id, booking["tracking"], idempotency_key=ctx.idempotency_key("hand-over-parcel")
        ),
    )
    return {"tracking": booking["tracking"]}


@durable_function("shop.nightly_report", version=1)
def nightly_report(ctx, options):
    """Email the last 24 hours' order and revenue totals; fired by the cron schedule in settings.

    Args:
        ctx: the durable context.
        options: ``{"to": address}`` from the schedule's input.

    Returns:
        The totals that were emailed.
    """
    # The clock is read inside a step: a replay reports on the same window.
    until = ctx.step("pick-window", lambda: timezone.now().isoformat(timespec="seconds"))
    totals = ctx.step("compute-totals", lambda: reports.totals(until, hours=24))
    ctx.step(
        "email-report",
        lambda: outside.send_email(
            options["to"],
            "nightly-report",
            f"report until {until}",
            totals,
            idempotency_key=ctx.idempotency_key("email-report"),
        ),
    )
    return {"until": until, **totals}


# What the "assistant" answers, a word at a time (a stand-in for a language model's tokens).
ANSWER = (
    "Your order ships from the Leipzig warehouse tomorrow morning and should reach you within three working "
    "days; we will email the tracking number as soon as the carrier scans the parcel."
)


@durable_function("shop.write_tokens", version=1)
def write_tokens(ctx, request):
    """Answer a customer's question word by word, as a language model streams its tokens.

    Each word is written from the handler's body, so it is a durable step: a
    worker killed mid-answer leaves the words written so far, and the attempt
    that takes over writes only the rest (no word twice, none missing). The
    page reading the stream sees the answer grow, across the crash.

    Args:
        ctx: the durable context.
        request: ``{"question": str, "delay": seconds between words}``.
    """
    ctx.set_event("question", request["question"])
    for word in ANSWER.split():
        time.sleep(request.get("delay", 0.15))  # the model thinking
        ctx.write_stream("tokens", word)
    ctx.close_stream("tokens")
    return ANSWER
