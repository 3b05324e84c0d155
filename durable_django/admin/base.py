"""What the runs and schedules admins share: the durable alias, NUL-safe lookups, confirmed bulk actions."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from django.contrib import admin
from django.contrib.admin import helpers
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.views.main import ChangeList
from django.db.models import Model, QuerySet
from django.http import Http404, HttpRequest, HttpResponse

from ..conf import durable_settings

if TYPE_CHECKING:  # only for the annotations: operations is imported by the admins that use this module
    from .operations import Operation

_M = TypeVar("_M", bound=Model)

# Set while a changelist view runs: its reads go to the read alias.
_listing: ContextVar[bool] = ContextVar("durable_admin_listing", default=False)


# ModelAdmin is generic only in django-stubs (Django's class cannot be subscripted at run time), so the
# model type is this class's own parameter: RunAdmin is a DurableModelAdmin[Run].
class DurableModelAdmin(admin.ModelAdmin, Generic[_M]):  # type: ignore[type-arg]
    """What the runs and schedules admins share: the durable alias, and no NUL character sent to PostgreSQL.

    Every read goes to ``DURABLE["DATABASE"]`` whatever the routers say: the
    tables live there, and the API the admin writes through uses that alias;
    only the listings (and the overview above the runs listing) read from
    ``DURABLE["READ_DATABASE"]`` when it is set: a replica may lag, which a
    listing can afford and a run's page, just after an operation, cannot.
    PostgreSQL text cannot hold NUL, so a value with one names no record and the
    database refuses it with an error: an object URL with one is a 404, and a
    filter, search or selection with one is an invalid lookup.
    """

    def get_queryset(self, request: HttpRequest) -> QuerySet[_M]:
        alias = durable_settings.read_database if _listing.get() else durable_settings.DATABASE
        queryset: QuerySet[_M] = super().get_queryset(request).using(alias)
        return queryset

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        """The listing: its rows, counts, filters and search read from the read alias (querysets keep their
        alias, so the lazy ones the template evaluates later too)."""
        token = _listing.set(True)
        try:
            return super().changelist_view(request, extra_context)
        finally:
            _listing.reset(token)

    def get_object(self, request: HttpRequest, object_id: str, from_field: str | None = None) -> _M | None:
        if "\x00" in object_id:
            raise Http404("no record has an id with a NUL character")
        found: _M | None = super().get_object(request, object_id, from_field)
        return found

    def get_changelist_instance(self, request: HttpRequest) -> ChangeList:
        values = [value for _, values in request.GET.lists() for value in values]
        values += request.POST.getlist(helpers.ACTION_CHECKBOX_NAME)
        if any("\x00" in value for value in values):
            raise IncorrectLookupParameters("a filter, search or selection holds a NUL character")
        return super().get_changelist_instance(request)


class BulkOperations(Protocol):
    """An admin whose bulk actions are operations (the runs and schedules admins)."""

    def bulk_operation(
        self, request: HttpRequest, queryset: QuerySet[Any], operation: Operation[Any]
    ) -> HttpResponse | None: ...


def operation_action(
    operations: Mapping[str, Operation[Any]], key: str, noun: str
) -> Callable[[BulkOperations, HttpRequest, QuerySet[Any]], HttpResponse | None]:
    """The bulk action of one run or schedule operation, confirmed on an intermediate page."""
    operation = operations[key]

    @admin.action(permissions=[operation.permission], description=operation.action_description)
    def action(model_admin: BulkOperations, request: HttpRequest, queryset: QuerySet[Any]) -> HttpResponse | None:
        # The selection comes from the listing's queryset (a replica's, maybe): read the targets from the
        # primary, which is what the operation acts on, however far the replica lags.
        return model_admin.bulk_operation(request, queryset.using(durable_settings.DATABASE), operation)

    action.__name__ = f"{key}_{noun}"
    return action
