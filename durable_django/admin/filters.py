"""List filters that stay cheap on millions of runs: functions from the registry, tenants by a skip scan,
limit keys from the held-runs index."""

from __future__ import annotations

import uuid
from typing import Any

from django.contrib import admin
from django.contrib.admin.options import IncorrectLookupParameters
from django.db.models import QuerySet
from django.http import HttpRequest

from ..api import operations
from ..registry import registry
from ..states import RunStatus

# Tenants offered in the filter (each costs an index probe).
MAX_TENANT_CHOICES = 30
# Limit keys offered in the filter: those holding most runs back.
MAX_HELD_BY_CHOICES = 20


class FunctionFilter(admin.SimpleListFilter):
    """Functions from the registry: no DISTINCT scan over the runs."""

    title = "function"
    parameter_name = "function"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin[Any]) -> list[tuple[str, str]]:
        names = registry.names()
        current = self.value()
        if current and current not in names:
            names = sorted([*names, current])
        return [(name, name) for name in names]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        return queryset.filter(name=self.value()) if self.value() else queryset


def tenant_uuid(value: str) -> str:
    try:
        return str(uuid.UUID(value))
    except ValueError:
        raise IncorrectLookupParameters(f"tenant must be a UUID, got {value!r}") from None


class TenantFilter(admin.SimpleListFilter):
    """Untagged runs or one tenant; tenants are found by a skip scan, and any UUID may be typed in the URL."""

    title = "tenant"
    parameter_name = "tenant"
    UNTAGGED = "none"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin[Any]) -> list[tuple[str, str]]:
        tenants = operations.known_tenants(limit=MAX_TENANT_CHOICES)
        current = self.value()
        if current and current != self.UNTAGGED and current not in tenants:
            tenants = [*tenants, current]
        return [(self.UNTAGGED, "untagged"), *((tenant, tenant) for tenant in tenants)]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if not value:
            return queryset
        if value == self.UNTAGGED:
            return queryset.filter(tenant_id__isnull=True)
        return queryset.filter(tenant_id=tenant_uuid(value))


class ParentFilter(admin.SimpleListFilter):
    """The children of one run; shown only when a run's page links here."""

    title = "parent run"
    parameter_name = "parent"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin[Any]) -> list[tuple[str, str]]:
        value = self.value()
        return [(value, value)] if value else []

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        return queryset.filter(parent_run_id=self.value()) if self.value() else queryset


class HeldByFilter(admin.SimpleListFilter):
    """Due runs a limit holds back: by any limit, or by one of the keys holding most (any key may be typed
    in the URL)."""

    title = "held by a limit"
    parameter_name = "held_by"
    ANY = "any"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin[Any]) -> list[tuple[str, str]]:
        keys = [state.key for state in operations.held_by_limits(keys=MAX_HELD_BY_CHOICES)]
        current = self.value()
        if current and current != self.ANY and current not in keys:
            keys.append(current)
        return [(self.ANY, "any limit"), *((key, key) for key in keys)]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if not value:
            return queryset
        # Only a pending run is held (held_by is cleared at the claim): the held-runs index serves both.
        if value == self.ANY:
            return queryset.filter(status=RunStatus.PENDING, held_by__isnull=False)
        return queryset.filter(status=RunStatus.PENDING, held_by=value)
