"""Read-only admin pages for the shop's orders and for what the outside world received."""

from django.contrib import admin
from django.urls import reverse
from django.utils.html import format_html

from .models import LedgerEntry, Order, ServiceCall


class ReadOnlyAdmin(admin.ModelAdmin):
    """These rows are written by workflows and services, never by hand."""

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


def run_link(run_id: str):
    """A link to the durable run's page in durable_django's admin."""
    if not run_id:
        return "-"
    return format_html('<a href="{}">{}</a>', reverse("admin:durable_django_run_change", args=[run_id]), run_id)


@admin.register(Order)
class OrderAdmin(ReadOnlyAdmin):
    list_display = ["id", "email", "total_cents", "fulfilment_run", "confirmation_task", "created_at"]
    search_fields = ["email", "fulfilment_run_id"]

    @admin.display(description="fulfilment run")
    def fulfilment_run(self, order):
        return run_link(order.fulfilment_run_id)

    @admin.display(description="confirmation task run")
    def confirmation_task(self, order):
        return run_link(order.confirmation_task_id)


@admin.register(ServiceCall)
class ServiceCallAdmin(ReadOnlyAdmin):
    list_display = ["received_at", "service", "action", "subject", "idempotency_key"]
    list_filter = ["service", "action"]
    search_fields = ["subject", "idempotency_key"]


@admin.register(LedgerEntry)
class LedgerEntryAdmin(ReadOnlyAdmin):
    list_display = ["created_at", "service", "action", "subject", "idempotency_key"]
    list_filter = ["service", "action"]
    search_fields = ["subject", "idempotency_key"]
