"""A plain Django Tasks task; ``TASKS`` in settings routes it to durable_django's backend.

It needs no durable.py registration: the worker runs it by its import path.
"""

try:  # Django 6 ships the framework; on Django 5.2 the django-tasks package backports it.
    from django.tasks import task
except ImportError:
    from django_tasks import task

from . import outside
from .models import Order


@task()
def send_order_confirmation(order_id: int) -> dict:
    """Email the customer that the order was received.

    The key is the order's own, so however often the task runs (a retry, a
    worker that died mid-send) the customer receives one confirmation.

    Returns:
        The mailer's answer, stored as the task's return value.
    """
    order = Order.objects.get(pk=order_id)
    return outside.send_email(
        order.email,
        "order-confirmation",
        f"order {order_id}",
        {"total_cents": order.total_cents},
        idempotency_key=f"order-{order_id}-confirmation",
    )
