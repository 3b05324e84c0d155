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
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, ngettext

from ..api import bulk as bulk_api
from ..api import operations as api_operations
from ..models import Run
from ..states import RunStatus
from ..tenancy import unscope
from . import bulk, operations, run_columns, search
from .base import DurableModelAdmin, operation_action
from .control import ALL_RUN_OPERATIONS
from .display import compact_duration, describe_deadline, describe_wait, moment, run_url, shorten, status_badge
from .filters import FunctionFilter, HeldByFilter, ParentFilter, ParkedFilter, TenantFilter, searchable, tenant_uuid
from .pagination import EstimatedCountPaginator
from .run_chart import live_context
from .run_page import run_page_context, shown_fields

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

    @admin.display(description=gettext_lazy("status"))
    def colored_status(self, run: Run) -> str:
        return status_badge(run.status)

    @admin.display(description=gettext_lazy("function"))
    def function(self, run: Run) -> str:
        return format_html('{} <span class="durable-version">v{}</span>', run_columns.breakable(run.name), run.version)

    @admin.display(description=gettext_lazy("claims and failures"))
    def attempts_display(self, run: Run) -> str:
        return run_columns.claims_and_failures(run, short=False)

    @admin.display(description=gettext_lazy("now"))
    def now(self, run: Run) -> str:
        """What the run does or waits for now: its lease, wait, holding limit, deadline and progress."""
        return run_columns.lines(
            [
                self.lease(run),
                self.waiting(run),
                format_html(_("held by {}"), self.held_by_display(run)) if run.held_by else "",
                format_html(_("deadline {}"), self.deadline_display(run)) if run.deadline else "",
                self.progress_display(run),
            ]
        )

    @admin.display(description=gettext_lazy("progress"))
    def progress_display(self, run: Run) -> str:
        text: str | None = getattr(run, "progress_text", None)
        if text is None:
            return "—"
        cut = "…" if getattr(run, "progress_chars", 0) > len(text) else ""
        return format_html('<span class="durable-progress">{}{}</span>', text, cut)

    @admin.display(description=gettext_lazy("lease"))
    def lease(self, run: Run) -> str:
        if run.status != RunStatus.RUNNING or run.leased_until is None:
            return "—"
        left = run.leased_until - timezone.now()
        holder = _("held by %(worker)s") % {"worker": run.worker_id or _("a worker")}
        if left.total_seconds() >= 0:
            return format_html(
                '<span title="{}">{}</span>', holder, _("%(duration)s left") % {"duration": compact_duration(left)}
            )
        return format_html(
            '<span class="durable-expired" title="{}">{}</span>',
            holder,
            _("expired %(duration)s ago") % {"duration": compact_duration(left)},
        )

    @admin.display(description=gettext_lazy("waiting for"))
    def waiting(self, run: Run) -> str:
        return describe_wait(run) or "—"

    @admin.display(description=gettext_lazy("held by"))
    def held_by_display(self, run: Run) -> str:
        if run.held_by is None:
            return "—"
        return format_html('<a href="{}">{}</a>', held_by_url(run.held_by), shorten(run.held_by))

    @admin.display(description=gettext_lazy("deadline"))
    def deadline_display(self, run: Run) -> str:
        return describe_deadline(run) or "—"

    @admin.display(description=gettext_lazy("tenant"))
    def tenant(self, run: Run) -> str:
        if run.tenant_id is None:
            return "—"
        return format_html('<span title="{}">{}…</span>', run.tenant_id, str(run.tenant_id)[:8])

    # -- a run's page ------------------------------------------------------

    @admin.display(description=gettext_lazy("queue / priority"))
    def queue_and_priority(self, run: Run) -> str:
        return f"{run.queue} / {run.priority}"

    @admin.display(description=gettext_lazy("keys"))
    def keys(self, run: Run) -> str:
        rows = [
            (label, shorten(unscope(key)))
            for label, key in ((_("idempotency"), run.idempotency_key), (_("coalesce"), run.coalesce_key))
            if key
        ]
        if not rows:
            return "—"
        return format_html_join(", ", "{}: <code>{}</code>", rows)

    @admin.display(description=gettext_lazy("retry policy"))
    def retry_policy_display(self, run: Run) -> str:
        return format_html("<code>{}</code>", json.dumps(run.retry_policy, sort_keys=True))

    @admin.display(description=gettext_lazy("held by a limit"))
    def held_by_limit(self, run: Run) -> str:
        """Which limit holds this due run back, how many runs it holds and how many run under it now."""
        if run.held_by is None or run.status != RunStatus.PENDING:
            return "—"
        state = api_operations.limit_state(run.held_by)
        held = ngettext("%(count)s run held", "%(count)s runs held", state.held) % {"count": state.held}
        return format_html(
            '<code>{}</code>: <a href="{}">{}</a>, {}',
            shorten(run.held_by),
            held_by_url(run.held_by),
            held,
            _("%(count)s running under it") % {"count": state.running},
        )

    @admin.display(description=gettext_lazy("trace"))
    def trace(self, run: Run) -> str:
        """The trace its enqueue was part of (W3C trace id), to look its spans up in a tracing backend."""
        traceparent = (run.trace_context or {}).get("traceparent", "")
        parts = traceparent.split("-")
        if len(parts) != 4:
            return "—"
        return format_html('<code title="traceparent {}">{}</code>', traceparent, parts[1])

    @admin.display(description=gettext_lazy("cancellation"))
    def cancellation(self, run: Run) -> str:
        parts = [
            (label, moment(when))
            for label, when in (
                (_("requested"), run.cancel_requested_at),
                (_("refused"), run.cancel_refused_at),
                (_("pivot step journalled"), run.pivoted_at),
            )
            if when
        ]
        if not parts:
            return "—"
        return format_html_join("; ", _("{} at {}"), parts)

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

    # -- operations --------------------------------------------------------

    def get_urls(self) -> list[URLPattern]:
        urls = [
            path(
                f"<path:object_id>/{key}/",
                self.admin_site.admin_view(self.run_operation_view),
                {"key": key},
                name=f"durable_django_run_{key}",
            )
            for key in ALL_RUN_OPERATIONS
        ]
        live = path(
            "<path:object_id>/live/", self.admin_site.admin_view(self.live_view), name="durable_django_run_live"
        )
        return [live, *urls, *super().get_urls()]

    def live_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """The live part of a run's page (its timeline chart and attempts), which the page fetches while it runs."""
        run = self.get_object(request, unquote(object_id))
        if run is None or not self.has_view_permission(request, run):
            raise PermissionDenied
        context = {**live_context(run, request), "live_url": request.path}
        return TemplateResponse(request, "admin/durable_django/run/live.html", context)

    def operation_form(
        self, request: HttpRequest, operation: operations.Operation[Run], runs: list[Run]
    ) -> operations.OperationForm | None:
        if operation.form_class is None:
            return None
        confirming = request.POST.get("confirm") == "yes"
        initial = operation.form_class.initial_for(runs[0], request) if len(runs) == 1 else {}
        run = runs[0] if len(runs) == 1 else None
        return operation.form_class(request.POST if confirming else None, initial=initial, run=run)

    def bulk_operation(
        self, request: HttpRequest, queryset: QuerySet[Run], operation: operations.Operation[Run]
    ) -> TemplateResponse | None:
        """Confirm, then perform one operation on each selected run and list every outcome; with "select all",
        on every run the filters match, as a durable run (``bulk``)."""
        if request.POST.get("select_across") == "1" and operation.key in bulk_api.OPERATIONS:
            return bulk.bulk_by_filter(self, request, operation)  # type: ignore[return-value]
        runs = list(queryset.defer(*HEAVY_COLUMNS)[: operations.MAX_ACTION_TARGETS + 1])
        if len(runs) > operations.MAX_ACTION_TARGETS:
            self.message_user(
                request,
                _("Select at most %(count)s runs for one action; narrow the filters.")
                % {"count": operations.MAX_ACTION_TARGETS},
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
        operation = ALL_RUN_OPERATIONS[key]
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
