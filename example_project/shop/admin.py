"""Read-only admin pages for the shop's orders and for what the outside world received."""

from django.contrib import admin

from .models import LedgerEntry, Order, ServiceCall


class ReadOnlyAdmin(admin.ModelAdmin):
    """These rows are written by workflows and services, never by hand."""

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(Order)
class OrderAdmin(ReadOnlyAdmin):
    list_display = ["id", "email", "total_cents", "fulfilment_run_id", "confirmation_task_id", "created_at"]
    search_fields = ["email", "fulfilment_run_id"]


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
