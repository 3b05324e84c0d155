"""What the runs and schedules admins share: the durable alias, NUL-safe lookups, confirmed bulk actions."""

from __future__ import annotations

from django.contrib import admin
from django.contrib.admin import helpers
from django.contrib.admin.options import IncorrectLookupParameters
from django.http import Http404

from ..conf import durable_settings


class DurableModelAdmin(admin.ModelAdmin):
    """What the runs and schedules admins share: the durable alias, and no NUL character sent to PostgreSQL.

    Every read goes to ``DURABLE["DATABASE"]`` whatever the routers say: the
    tables live there, and the API the admin writes through uses that alias.
    PostgreSQL text cannot hold NUL, so a value with one names no record and the
    database refuses it with an error: an object URL with one is a 404, and a
    filter, search or selection with one is an invalid lookup.
    """

    def get_queryset(self, request):
        return super().get_queryset(request).using(durable_settings.DATABASE)

    def get_object(self, request, object_id, from_field=None):
        if "\x00" in object_id:
            raise Http404("no record has an id with a NUL character")
        return super().get_object(request, object_id, from_field)

    def get_changelist_instance(self, request):
        values = [value for _, values in request.GET.lists() for value in values]
        values += request.POST.getlist(helpers.ACTION_CHECKBOX_NAME)
        if any("\x00" in value for value in values):
            raise IncorrectLookupParameters("a filter, search or selection holds a NUL character")
        return super().get_changelist_instance(request)


def operation_action(operations: dict, key: str, noun: str):
    """The bulk action of one run or schedule operation, confirmed on an intermediate page."""
    operation = operations[key]

    @admin.action(permissions=[operation.permission], description=operation.action_description)
    def action(model_admin, request, queryset):
        return model_admin.bulk_operation(request, queryset, operation)

    action.__name__ = f"{key}_{noun}"
    return action
