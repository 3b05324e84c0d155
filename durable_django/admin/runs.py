"""The runs admin: a listing that stays fast on millions of rows, a run's page, and the run operations.

The listing orders by the listing index (newest first, ``created_at DESC, run_id DESC``) and
allows no other sort, shows no facet counts, counts exactly only up to a bound
and takes the planner's estimate beyond it; its overview reads capped,
indexed windows. Records are read only; every change goes through the client
API (``operations``), after a confirmation page, for users with the permission.
"""

from __future__ import annotations

import json
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet, TextField
from django.db.models.functions import Cast, Left, Length
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.http import urlencode
from django.utils.safestring import SafeString

from ..api import operations as api_operations
from ..models import Run
from ..states import RunStatus
from ..tenancy import unscope
from . import operations
from .base import DurableModelAdmin, operation_action
from .display import compact_duration, describe_deadline, describe_wait, moment, run_url, shorten, status_badge
from .filters import FunctionFilter, HeldByFilter, ParentFilter, TenantFilter, tenant_uuid
from .pagination import EstimatedCountPaginator
from .run_page import run_page_context

# Tenants whose key prefixes a search tries (each costs an index probe).
MAX_TENANTS = 1000
# A coalesce key names many finished runs over time; a search lists at most this many.
MAX_SEARCH_MATCHES = 500
# Columns never read whole: a run's page reads them cut by PostgreSQL (see run_page).
LARGE_COLUMNS = ("input", "output", "error", "progress")
# Columns the listing never shows: left unread for its rows.
HEAVY_COLUMNS = (*LARGE_COLUMNS, "retry_policy")
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
class RunAdmin(DurableModelAdmin[Run]):
    list_display = (
        "run_id",
        "colored_status",
        "function",
        "attempts_display",
        "progress_display",
        "age",
        "lease",
        "waiting",
        "held_by_display",
        "deadline_display",
        "tenant",
        "created",
    )
    list_filter = (
        "status",
        FunctionFilter,
        TenantFilter,
        HeldByFilter,
        ("created_at", admin.DateFieldListFilter),
        ParentFilter,
    )
    search_fields = ("run_id",)
    search_help_text = "An exact run id, idempotency key or coalesce key (as it was passed, without a tenant prefix)."
    # The listing index's order; no other sort is offered, so no page sorts the table.
    ordering = ("-created_at", "-run_id")
    sortable_by = ()
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER
    paginator = EstimatedCountPaginator
    list_per_page = 100
    actions = [operation_action(operations.RUN_OPERATIONS, key, "runs") for key in operations.RUN_OPERATIONS]
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
        js = ["durable_django/autorefresh.js"]

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

    # -- listing -----------------------------------------------------------

    def get_queryset(self, request: HttpRequest) -> QuerySet[Run]:
        return super().get_queryset(request).defer(*LARGE_COLUMNS)

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return RunChangeList

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Run], search_term: str
    ) -> tuple[QuerySet[Run], bool]:
        """Exact matches only: the run id, or a key as the user passed it under any tenant's prefix.

        Keys are stored as ``{tenant_id}:{key}``; the candidates are the key under
        the untagged prefix and under each tenant that owns runs (the first
        MAX_TENANTS of them: with more, choose the tenant filter to search its keys).
        """
        term = search_term.strip()
        if not term:
            return queryset, False
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
                held_by_limits=[(state, held_by_url(state.key)) for state in api_operations.held_by_limits()],
            )
        return super().changelist_view(request, extra_context)

    @admin.display(description="status")
    def colored_status(self, run: Run) -> str:
        return status_badge(run.status)

    @admin.display(description="function")
    def function(self, run: Run) -> str:
        return format_html('{} <span class="durable-version">v{}</span>', run.name, run.version)

    @admin.display(description="attempts")
    def attempts_display(self, run: Run) -> str:
        notes = []
        if run.failures:
            notes.append(f"{run.failures} failed")
        if run.recoveries:
            notes.append(f"{run.recoveries} recovered")
        if not notes:
            return str(run.attempts)
        return format_html('{} <span class="durable-note">({})</span>', run.attempts, ", ".join(notes))

    @admin.display(description="progress")
    def progress_display(self, run: Run) -> str:
        text: str | None = getattr(run, "progress_text", None)
        if text is None:
            return "—"
        cut = "…" if getattr(run, "progress_chars", 0) > len(text) else ""
        return format_html('<span class="durable-progress">{}{}</span>', text, cut)

    @admin.display(description="age")
    def age(self, run: Run) -> str:
        return format_html(
            '<span title="{}">{}</span>', moment(run.created_at), compact_duration(timezone.now() - run.created_at)
        )

    @admin.display(description="created at")
    def created(self, run: Run) -> str:
        return moment(run.created_at)

    @admin.display(description="lease")
    def lease(self, run: Run) -> str:
        if run.status != RunStatus.RUNNING or run.leased_until is None:
            return "—"
        left = run.leased_until - timezone.now()
        holder = run.worker_id or "a worker"
        if left.total_seconds() >= 0:
            return format_html('<span title="held by {}">{} left</span>', holder, compact_duration(left))
        return format_html(
            '<span class="durable-expired" title="held by {}">expired {} ago</span>', holder, compact_duration(left)
        )

    @admin.display(description="waiting for")
    def waiting(self, run: Run) -> str:
        return describe_wait(run) or "—"

    @admin.display(description="held by")
    def held_by_display(self, run: Run) -> str:
        if run.held_by is None:
            return "—"
        return format_html('<a href="{}">{}</a>', held_by_url(run.held_by), shorten(run.held_by))

    @admin.display(description="deadline")
    def deadline_display(self, run: Run) -> str:
        return describe_deadline(run) or "—"

    @admin.display(description="tenant")
    def tenant(self, run: Run) -> str:
        if run.tenant_id is None:
            return "—"
        return format_html('<span title="{}">{}…</span>', run.tenant_id, str(run.tenant_id)[:8])

    # -- a run's page ------------------------------------------------------

    @admin.display(description="queue / priority")
    def queue_and_priority(self, run: Run) -> str:
        return f"{run.queue} / {run.priority}"

    @admin.display(description="keys")
    def keys(self, run: Run) -> str:
        rows = [
            (label, shorten(unscope(key)))
            for label, key in (("idempotency", run.idempotency_key), ("coalesce", run.coalesce_key))
            if key
        ]
        if not rows:
            return "—"
        return format_html_join(", ", "{}: <code>{}</code>", rows)

    @admin.display(description="retry policy")
    def retry_policy_display(self, run: Run) -> str:
        return format_html("<code>{}</code>", json.dumps(run.retry_policy, sort_keys=True))

    @admin.display(description="held by a limit")
    def held_by_limit(self, run: Run) -> str:
        """Which limit holds this due run back, how many runs it holds and how many run under it now."""
        if run.held_by is None or run.status != RunStatus.PENDING:
            return "—"
        state = api_operations.limit_state(run.held_by)
        return format_html(
            '<code>{}</code>: <a href="{}">{} run(s) held</a>, {} running under it',
            shorten(run.held_by),
            held_by_url(run.held_by),
            state.held,
            state.running,
        )

    @admin.display(description="trace")
    def trace(self, run: Run) -> str:
        """The trace its enqueue was part of (W3C trace id), to look its spans up in a tracing backend."""
        traceparent = (run.trace_context or {}).get("traceparent", "")
        parts = traceparent.split("-")
        if len(parts) != 4:
            return "—"
        return format_html('<code title="traceparent {}">{}</code>', traceparent, parts[1])

    @admin.display(description="cancellation")
    def cancellation(self, run: Run) -> str:
        parts = [
            (label, moment(when))
            for label, when in (
                ("requested", run.cancel_requested_at),
                ("refused", run.cancel_refused_at),
                ("pivot step journalled", run.pivoted_at),
            )
            if when
        ]
        if not parts:
            return "—"
        return format_html_join("; ", "{} at {}", parts)

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

    # -- operations --------------------------------------------------------

    def get_urls(self) -> list[URLPattern]:
        urls = [
            path(
                f"<path:object_id>/{key}/",
                self.admin_site.admin_view(self.run_operation_view),
                {"key": key},
                name=f"durable_django_run_{key}",
            )
            for key in operations.RUN_OPERATIONS
        ]
        return urls + super().get_urls()

    def operation_form(
        self, request: HttpRequest, operation: operations.Operation[Run], runs: list[Run]
    ) -> operations.SignalForm | None:
        if operation.form_class is None:
            return None
        confirming = request.POST.get("confirm") == "yes"
        initial = operation.form_class.initial_for(runs[0].waiting_for) if len(runs) == 1 else {}
        return operation.form_class(request.POST if confirming else None, initial=initial)

    def bulk_operation(
        self, request: HttpRequest, queryset: QuerySet[Run], operation: operations.Operation[Run]
    ) -> TemplateResponse | None:
        """Confirm, then perform one operation on each selected run and list every outcome."""
        runs = list(queryset.defer(*HEAVY_COLUMNS)[: operations.MAX_ACTION_TARGETS + 1])
        if len(runs) > operations.MAX_ACTION_TARGETS:
            self.message_user(
                request,
                f"Select at most {operations.MAX_ACTION_TARGETS} runs for one action; narrow the filters.",
                level=messages.ERROR,
            )
            return None
        # The confirmation posts the listed ids to the unfiltered listing: exactly these runs, no others.
        outcomes, confirmation = operations.confirm_then_perform(
            self,
            request,
            operation=operation,
            targets=runs,
            describe=describe_run,
            bulk=True,
            form=self.operation_form(request, operation, runs),
            hidden=[("action", f"{operation.key}_runs"), ("index", "0")],
            confirm_url=reverse("admin:durable_django_run_changelist"),
            back_url=request.get_full_path(),
        )
        if confirmation is not None:
            return confirmation
        assert outcomes is not None, "confirm_then_perform gives outcomes or a confirmation page"
        return operations.outcomes_response(self, request, operation=operation, targets=runs, outcomes=outcomes)

    def run_operation_view(self, request: HttpRequest, object_id: str, key: str) -> HttpResponse:
        """The button on a run's page: confirm, perform, and return to the run with its outcome."""
        operation = operations.RUN_OPERATIONS[key]
        permitted = getattr(self, f"has_{operation.permission}_permission")
        if not (self.has_view_permission(request) and permitted(request)):
            raise PermissionDenied
        run = self.get_object(request, unquote(object_id))
        if run is None:
            raise Http404(f"no run {object_id}")
        here = run_url(run.run_id)
        outcomes, confirmation = operations.confirm_then_perform(
            self,
            request,
            operation=operation,
            targets=[run],
            describe=describe_run,
            form=self.operation_form(request, operation, [run]),
            back_url=here,
        )
        if confirmation is not None:
            return confirmation
        assert outcomes is not None, "confirm_then_perform gives outcomes or a confirmation page"
        operations.message_outcome(self, request, operation, outcomes[0])
        return HttpResponseRedirect(run_url(outcomes[0].new_run_id) if outcomes[0].new_run_id else here)


def held_by_url(key: str) -> str:
    """The runs listing filtered to the runs one limit key holds back."""
    return f"{reverse('admin:durable_django_run_changelist')}?{urlencode({HeldByFilter.parameter_name: key})}"


def describe_run(run: Run) -> SafeString:
    return format_html("{} v{} {}", run.name, run.version, status_badge(run.status))
