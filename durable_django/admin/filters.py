"""List filters that stay cheap on millions of runs: functions from the registry, tenants by a skip scan,
limit keys from the held-runs index."""

from __future__ import annotations

import uuid
from typing import Any

from django.contrib import admin
from django.contrib.admin.options import IncorrectLookupParameters
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from .. import storable
from ..api import operations
from ..exceptions import InvalidInput
from ..registry import registry
from ..states import RunStatus

# Tenants offered in the filter (each costs an index probe).
MAX_TENANT_CHOICES = 30
# Limit keys offered in the filter: those holding most runs back.
MAX_HELD_BY_CHOICES = 20


class FunctionFilter(admin.SimpleListFilter):
    """Functions from the registry: no DISTINCT scan over the runs."""

    title = gettext_lazy("function")
    parameter_name = "function"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin[Any]) -> list[tuple[str, str]]:
        names = registry.names()
        current = self.value()
        if current and current not in names:
            names = sorted([*names, current])
        return [(name, name) for name in names]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        return queryset.filter(name=stored_name(value, what="function")) if value else queryset


def searchable(term: str) -> bool:
    """Could a stored id or key equal this term? (Text PostgreSQL cannot store cannot be compared either.)"""
    try:
        storable.text(term, what="the search term")
    except InvalidInput:
        return False
    return True


def stored_name(value: str, *, what: str) -> str:
    """A name typed in the URL, as a lookup can take it: else the listing's "invalid lookup" notice."""
    try:
        return storable.text(value, what=what)
    except InvalidInput as exc:
        raise IncorrectLookupParameters(str(exc)) from None


class ParkedFilter(admin.SimpleListFilter):
    """Runs parked for an operator: their last allowed attempt failed under ``on_exhausted="park"``."""

    title = gettext_lazy("parked")
    parameter_name = "parked"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin[Any]) -> list[tuple[str, str]]:
        return [("yes", _("parked (waiting for an operator)"))]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() != "yes":
            return queryset
        return queryset.filter(status=RunStatus.WAITING, parked_at__isnull=False)


def tenant_uuid(value: str) -> str:
    try:
        return str(uuid.UUID(value))
    except ValueError:
        raise IncorrectLookupParameters(_("tenant must be a UUID, got %(value)s") % {"value": repr(value)}) from None


class TenantFilter(admin.SimpleListFilter):
    """Untagged runs or one tenant; tenants are found by a skip scan, and any UUID may be typed in the URL."""

    title = gettext_lazy("tenant")
    parameter_name = "tenant"
    UNTAGGED = "none"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin[Any]) -> list[tuple[str, str]]:
        tenants = operations.known_tenants(limit=MAX_TENANT_CHOICES)
        current = self.value()
        if current and current != self.UNTAGGED and current not in tenants:
            tenants = [*tenants, current]
        return [(self.UNTAGGED, _("untagged")), *((tenant, tenant) for tenant in tenants)]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if not value:
            return queryset
        if value == self.UNTAGGED:
            return queryset.filter(tenant_id__isnull=True)
        return queryset.filter(tenant_id=tenant_uuid(value))


class ParentFilter(admin.SimpleListFilter):
    """The children of one run; shown only when a run's page links here."""

    title = gettext_lazy("parent run")
    parameter_name = "parent"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin[Any]) -> list[tuple[str, str]]:
        value = self.value()
        return [(value, value)] if value else []

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        return queryset.filter(parent_run_id=stored_name(value, what="parent run")) if value else queryset


class HeldByFilter(admin.SimpleListFilter):
    """Due runs a limit holds back: by any limit, or by one of the keys holding most (any key may be typed
    in the URL)."""

    title = gettext_lazy("held by a limit")
    parameter_name = "held_by"
    ANY = "any"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin[Any]) -> list[tuple[str, str]]:
        keys = [state.key for state in operations.held_by_limits(keys=MAX_HELD_BY_CHOICES)]
        current = self.value()
        if current and current != self.ANY and current not in keys:
            keys.append(current)
        return [(self.ANY, _("any limit")), *((key, key) for key in keys)]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if not value:
            return queryset
        # Only a pending run is held (held_by is cleared at the claim): the held-runs index serves both.
        if value == self.ANY:
            return queryset.filter(status=RunStatus.PENDING, held_by__isnull=False)
        return queryset.filter(status=RunStatus.PENDING, held_by=stored_name(value, what="limit key"))
