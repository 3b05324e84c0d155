"""The runs admin: a listing that stays fast on millions of rows, and a run's page.

The listing orders by the listing index (newest first, ``created_at DESC, run_id DESC``) and
allows no other sort, shows no facet counts, counts exactly only up to a bound
and takes the planner's estimate beyond it; its overview reads capped,
indexed windows. Records are read only; every change goes through the client
API, after a confirmation page, for users with the permission (``run_actions``).
What each cell shows is ``run_cells``; a run's page beyond its summary is ``run_page``.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.admin.views.main import ChangeList
from django.db.models import QuerySet, TextField
from django.db.models.functions import Cast, Left, Length
from django.http import HttpRequest, HttpResponse
from django.utils.translation import gettext_lazy

from ..api import operations as api_operations
from ..models import Run
from . import run_columns, search
from .base import operation_action
from .control import ALL_RUN_OPERATIONS
from .display import compact_duration, moment
from .filters import FunctionFilter, HeldByFilter, ParentFilter, ParkedFilter, TenantFilter, searchable, tenant_uuid
from .pagination import EstimatedCountPaginator
from .run_actions import RunActions
from .run_cells import RunCells, held_by_url
from .run_columns import HEAVY_COLUMNS, LARGE_COLUMNS
from .run_page import run_page_context, shown_fields

# Tenants whose key prefixes a search tries (each costs an index probe).
MAX_TENANTS = 1000
# A coalesce key names many finished runs over time; a search lists at most this many.
MAX_SEARCH_MATCHES = 500
# The listing shows the start of a run's progress, cut by PostgreSQL.
PROGRESS_LISTING_CHARS = 80


class RunChangeList(ChangeList):
    """The runs listing leaves the large JSON columns unread, and reads the start of each run's progress."""

    def get_queryset(self, request: HttpRequest, exclude_parameters: list[str | None] | None = None) -> QuerySet[Any]:
        progress = Cast("progress", TextField())
        queryset: QuerySet[Any] = (
            super()
            .get_queryset(request, exclude_parameters)
            .defer(*HEAVY_COLUMNS)
            .annotate(progress_text=Left(progress, PROGRESS_LISTING_CHARS), progress_chars=Length(progress))
        )
        return queryset


@admin.register(Run)
class RunAdmin(RunCells, RunActions):
    """Runs, read only: the listing and a run's page; its cells come from ``RunCells``, its operations from
    ``RunActions``."""

    # What an operator reads first, each cell short, so the listing fits a laptop's window without scrolling
    # sideways (run_columns); the lease, wait, limit, deadline and progress share the "now" column.
    list_display = (
        run_columns.short_id,
        "colored_status",
        "function",
        run_columns.claims,
        run_columns.when,
        "now",
        run_columns.queue_and_tenant,
    )
    list_display_links = (run_columns.short_id,)
    list_filter = (
        "status",
        FunctionFilter,
        TenantFilter,
        HeldByFilter,
        ParkedFilter,
        ("created_at", admin.DateFieldListFilter),
        ParentFilter,
    )
    search_fields = ("run_id",)
    search_help_text = gettext_lazy(
        "An exact run id, idempotency key or coalesce key (as it was passed, without a tenant prefix); or "
        'input terms: input.customer=42 input.address.city="Berlin".'
    )
    # The listing index's order; no other sort is offered, so no page sorts the table.
    ordering = ("-created_at", "-run_id")
    sortable_by = ()
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER
    paginator = EstimatedCountPaginator
    list_per_page = 100
    actions = [
        operation_action(ALL_RUN_OPERATIONS, key, "runs")
        for key, operation in ALL_RUN_OPERATIONS.items()
        if operation.bulk
    ]
    readonly_fields = (
        "run_id",
        "function",
        "colored_status",
        "queue_and_priority",
        "tenant",
        "keys",
        "attempts_display",
        "retry_policy_display",
        "worker_id",
        "waiting",
        "held_by_limit",
        "deadline_display",
        "cancellation",
        "trace",
    )
    fieldsets = [
        (None, {"fields": readonly_fields}),
    ]

    class Media:
        css = {"all": ["durable_django/admin.css"]}
        js = ["durable_django/autorefresh.js", "durable_django/live_run.js"]

    # -- read only ---------------------------------------------------------

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Run | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Run | None = None) -> bool:
        return False

    def has_cancel_permission(self, request: HttpRequest, obj: Run | None = None) -> bool:
        return request.user.has_perm("durable_django.cancel_run")

    def has_retry_permission(self, request: HttpRequest, obj: Run | None = None) -> bool:
        return request.user.has_perm("durable_django.retry_run")

    def has_signal_permission(self, request: HttpRequest, obj: Run | None = None) -> bool:
        return request.user.has_perm("durable_django.signal_run")

    def has_pause_permission(self, request: HttpRequest, obj: Run | None = None) -> bool:
        return request.user.has_perm("durable_django.pause_run")

    def has_fork_permission(self, request: HttpRequest, obj: Run | None = None) -> bool:
        return request.user.has_perm("durable_django.fork_run")

    def has_resume_on_version_permission(self, request: HttpRequest, obj: Run | None = None) -> bool:
        return request.user.has_perm("durable_django.resume_run_on_version")

    # -- listing -----------------------------------------------------------

    def get_queryset(self, request: HttpRequest) -> QuerySet[Run]:
        return super().get_queryset(request).defer(*LARGE_COLUMNS)

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return RunChangeList

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Run], search_term: str
    ) -> tuple[QuerySet[Run], bool]:
        """Exact matches only: the run id, or a key as the user passed it under any tenant's prefix; or
        ``input.a.b=value`` terms, which the input must contain (see ``search``).

        Keys are stored as ``{tenant_id}:{key}``; the candidates are the key under
        the untagged prefix and under each tenant that owns runs (the first
        MAX_TENANTS of them: with more, choose the tenant filter to search its keys).
        """
        term = search_term.strip()
        if not term:
            return queryset, False
        if search.is_input_search(term):
            return queryset.filter(input__contains=search.input_document(term)), False
        if not searchable(term):
            return queryset.none(), False  # no stored id or key holds it
        tenant = request.GET.get(TenantFilter.parameter_name)
        if tenant == TenantFilter.UNTAGGED:
            prefixes = [""]
        elif tenant:
            prefixes = [tenant_uuid(tenant)]
        else:
            prefixes = ["", *api_operations.known_tenants(limit=MAX_TENANTS)]
        # The term itself too, so a key typed with its stored prefix is found as well.
        stored_keys = [term, *(f"{prefix}:{term}" for prefix in prefixes)]
        # Separate lookups so each uses its own index (an OR across them would scan the table), on the
        # alias the listing reads from.
        runs = Run.objects.using(queryset.db)
        matches = set(runs.filter(run_id=term).values_list("pk", flat=True))
        matches.update(runs.filter(idempotency_key__in=stored_keys).values_list("pk", flat=True))
        coalesced = runs.filter(coalesce_key__in=stored_keys).values_list("pk", flat=True)
        matches.update(coalesced[:MAX_SEARCH_MATCHES])
        return queryset.filter(pk__in=matches), False

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        extra_context = dict(extra_context or {})
        if request.method == "GET":
            overview = api_operations.overview()
            age = overview.oldest_pending_age
            extra_context.update(
                overview=overview,
                oldest_pending_age=compact_duration(age) if age is not None else "",
                oldest_pending_created=moment(created) if (created := overview.oldest_pending_created_at) else "",
                held_by_limits=[(state, held_by_url(state.key)) for state in api_operations.held_by_limits()],
            )
        return super().changelist_view(request, extra_context)

    # -- a run's page ------------------------------------------------------

    def get_fieldsets(self, request: HttpRequest, obj: Run | None = None) -> Any:
        """A run's summary without its empty rows, so what matters is on the first screen."""
        if obj is None:
            return super().get_fieldsets(request, obj)
        return [(None, {"fields": shown_fields(self, obj)})]

    def render_change_form(
        self,
        request: HttpRequest,
        context: dict[str, Any],
        add: bool = False,
        change: bool = False,
        form_url: str = "",
        obj: Run | None = None,
    ) -> HttpResponse:
        if obj is not None:
            context.update(run_page_context(self, request, obj))
        return super().render_change_form(request, context, add, change, form_url, obj)
