"""The admin: where operators watch and steer durable work.

Records are read through the models and never written through them: there is
no add, no edit and no delete of runs. Every change an operator makes (cancel,
resume, retry, signal; schedule edits, enable/disable, fire now) goes through
the client API in :mod:`durable_django.admin_actions`, after a confirmation
page, and only for users holding the matching permission.

The runs listing stays fast on a table of millions of rows: it orders by the
listing index (``created_at DESC, run_id DESC``) and allows no other sort,
shows no facet counts, counts exactly only up to a bound and takes the
planner's estimate beyond it, and its overview reads capped, indexed windows.
A run's page stays under a fixed size however much the run holds: PostgreSQL
cuts its large values before they are read, and its journal comes a page at a time.
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
import uuid
from datetime import timedelta
from functools import cached_property
from zoneinfo import ZoneInfo

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.utils import quote, unquote
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db import transaction
from django.db.models import Func, TextField
from django.db.models.functions import Left, Length, Right
from django.http import Http404, HttpResponseRedirect
from django.urls import path, reverse
from django.utils.http import urlencode
from django.utils import timezone
from django.utils.formats import date_format
from django.utils.html import format_html, format_html_join

from . import admin_actions, schedules_api
from .conf import durable_settings
from .engine import cron as cron_math
from .exceptions import InvalidSchedule, UnknownFunction
from .models import Run, Schedule, Signal, Step
from .registry import registry
from .states import RunStatus
from .store import overview as overview_store
from .tenancy import normalize_tenant, scope, unscope

# A run's page stays under a fixed size whatever the run holds: PostgreSQL cuts every value
# before the admin reads it, the journal is shown a page at a time, signals and children are capped.
JOURNAL_PAGE_ROWS = 50
MAX_SIGNAL_ROWS = 50
MAX_CHILD_ROWS = 50
# Input and output are cut at this many characters of their indented JSON.
MAX_JSON_CHARS = 20_000
# A step's result or a signal's value, in its table row.
MAX_CELL_CHARS = 1_000
# An error keeps its beginning and its end (the exception and its message).
ERROR_HEAD_CHARS = ERROR_TAIL_CHARS = 10_000
# Names and keys callers choose, shown whole up to this length.
MAX_NAME_CHARS = 200
# Tenants offered in the filter and matched by key search (each costs an index probe).
MAX_TENANTS = 1000
MAX_TENANT_CHOICES = 30
# A coalesce key names many finished runs over time; a search lists at most this many.
MAX_SEARCH_MATCHES = 500
# Columns never read whole: a run's page reads them cut by PostgreSQL (``json_excerpt``, ``error_excerpt``).
LARGE_COLUMNS = ("input", "output", "error")
# Columns the listing never shows: left unread for its rows.
HEAVY_COLUMNS = (*LARGE_COLUMNS, "retry_policy")


class JSONBPretty(Func):
    """PostgreSQL's ``jsonb_pretty()``: a jsonb value as indented text."""

    function = "jsonb_pretty"
    output_field = TextField()


def json_excerpt(field: str, limit: int, name: str | None = None) -> dict:
    """Annotations of a jsonb column: ``{name}_text``, its indented text cut at ``limit``, and ``{name}_chars``.

    Fed to :func:`cut_text`; the text is None for SQL NULL. ``name`` defaults to the column's.
    """
    pretty = JSONBPretty(field)
    name = name or field
    return {f"{name}_text": Left(pretty, limit), f"{name}_chars": Length(pretty)}


def cut_text(text: str | None, chars: int | None) -> str | None:
    """A value read cut by PostgreSQL, with what was cut announced."""
    if text is None or chars <= len(text):
        return text
    return f"{text}\n… cut here: {chars - len(text):,} more characters (the record keeps all of them)"


def error_excerpt() -> dict:
    """Annotations of a run's error: its beginning, its end and its length."""
    return {"error_head": Left("error", ERROR_HEAD_CHARS), "error_tail": Right("error", ERROR_TAIL_CHARS),
            "error_chars": Length("error")}


def cut_error(head: str | None, tail: str | None, chars: int | None) -> str | None:
    """An error from its beginning and end: whole when they overlap, else with the middle cut."""
    if head is None:
        return None
    missing = chars - len(head) - len(tail)
    if missing <= 0:
        return head + tail[-missing:]
    return f"{head}\n\n… {missing:,} characters cut here …\n\n{tail}"


def shorten(text: str) -> str:
    """A caller-chosen name or key, cut for display at MAX_NAME_CHARS."""
    return text if len(text) <= MAX_NAME_CHARS else f"{text[:MAX_NAME_CHARS]}…"


def readable_traceback(text: str) -> str:
    """A stored traceback with each file shown relative to the import path it was loaded from.

    ``.../site-packages/durable_django/engine/execute.py`` reads as
    ``durable_django/engine/execute.py``: the module is what an operator looks
    for. Paths outside this process's import path are left whole.
    """
    roots = sorted({os.path.join(os.path.abspath(entry or os.curdir), "") for entry in sys.path}, key=len,
                   reverse=True)
    roots = [root for root in roots if len(root) > 1]

    def shorten(match):
        path = match.group(1)
        root = next((root for root in roots if path.startswith(root)), None)
        return f'File "{path[len(root):]}"' if root else match.group(0)

    return re.sub(r'File "([^"]+)"', shorten, text)


def compact_duration(delta: timedelta) -> str:
    """A short human duration: 45s, 3m 20s, 5h 2m, 12d 4h."""
    total = int(abs(delta.total_seconds()))
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes}m"
    if minutes:
        return f"{minutes}m {secs}s"
    return f"{secs}s"


def moment(when) -> str:
    """A datetime in the admin's zone, to the second: operators compare moments closely."""
    return date_format(timezone.localtime(when), "Y-m-d H:i:s")


def status_badge(status: str):
    label = RunStatus(status).label if status in RunStatus.values else status
    return format_html('<span class="durable-status durable-status-{}">{}</span>', status, label)


def run_url(run_id: str) -> str:
    return reverse("admin:durable_django_run_change", args=[quote(run_id)])


def run_link(run_id: str, text: str | None = None):
    return format_html('<a href="{}" class="durable-run-id">{}</a>', run_url(run_id), text or run_id)


def describe_wait(run: Run):
    """What a run is waiting for, as an operator reads it (None when it waits for nothing)."""
    until = run.available_at
    if run.status == RunStatus.WAITING and run.waiting_for:
        kind, _, rest = run.waiting_for.partition(":")
        if kind == "sleep":
            return format_html("sleep until {}", moment(until)) if until else "sleep"
        if kind == "signal":
            name, _, occurrence = rest.rpartition(":")
            name = shorten(name)
            text = format_html("signal “{}”", name) if occurrence == "0" else format_html(
                "signal “{}” #{}", name, occurrence)
            return format_html("{} (timeout {})", text, moment(until)) if until else text
        if kind == "child":
            return format_html("child {}", run_link(rest, rest[:8] + "…"))
        return run.waiting_for
    if run.status == RunStatus.PENDING and until and until > timezone.now():
        return format_html("not before {}", moment(until))
    if run.status == RunStatus.RUNNING and run.cancel_requested_at and not run.pivoted_at:
        return "cancel requested"
    return None


class EstimatedCountPaginator(Paginator):
    """Counts exactly up to a bound; beyond it, takes the planner's estimate.

    Django's paginator runs ``COUNT(*)`` over the filtered queryset, which reads
    every matching row; on millions of runs that is the slowest part of a page.
    Here a probe reads at most ``exact_up_to`` ids (no ordering, so PostgreSQL
    picks the cheapest index), and only when it fills up does ``EXPLAIN`` give
    the estimate, never less than the probe saw. Pages stop at ``max_pages`` so
    no page needs an offset deeper than that: older runs are reached by filters.
    """

    exact_up_to = 1000
    max_pages = 100
    # Set by ``count``: whether it is PostgreSQL's estimate rather than exact.
    estimated = False

    @cached_property
    def count(self) -> int:
        probe = len(self.object_list.order_by().values_list("pk", flat=True)[: self.exact_up_to])
        self.estimated = probe >= self.exact_up_to
        if not self.estimated:
            return probe
        plan = json.loads(self.object_list.order_by().explain(format="json"))
        return max(int(plan[0]["Plan"]["Plan Rows"]), probe)

    @cached_property
    def num_pages(self) -> int:
        if self.count == 0 and not self.allow_empty_first_page:
            return 0
        hits = max(1, self.count - self.orphans)
        return min(math.ceil(hits / self.per_page), self.max_pages)

    @property
    def truncated(self) -> bool:
        """More rows match than the pages reach."""
        return self.count > self.max_pages * self.per_page


class RunChangeList(ChangeList):
    """The runs listing leaves the large JSON columns unread."""

    def get_queryset(self, request, exclude_parameters=None):
        return super().get_queryset(request, exclude_parameters).defer(*HEAVY_COLUMNS)


class FunctionFilter(admin.SimpleListFilter):
    """Functions from the registry: no DISTINCT scan over the runs."""

    title = "function"
    parameter_name = "function"

    def lookups(self, request, model_admin):
        names = registry.names()
        current = self.value()
        if current and current not in names:
            names = sorted([*names, current])
        return [(name, name) for name in names]

    def queryset(self, request, queryset):
        return queryset.filter(name=self.value()) if self.value() else queryset


def _tenant_uuid(value: str):
    try:
        return str(uuid.UUID(value))
    except ValueError:
        raise IncorrectLookupParameters(f"tenant must be a UUID, got {value!r}") from None


class TenantFilter(admin.SimpleListFilter):
    """Untagged runs or one tenant; tenants are found by a skip scan, and any UUID may be typed in the URL."""

    title = "tenant"
    parameter_name = "tenant"
    UNTAGGED = "none"

    def lookups(self, request, model_admin):
        tenants = overview_store.known_tenants(limit=MAX_TENANT_CHOICES)
        current = self.value()
        if current and current != self.UNTAGGED and current not in tenants:
            tenants = [*tenants, current]
        return [(self.UNTAGGED, "untagged"), *((tenant, tenant) for tenant in tenants)]

    def queryset(self, request, queryset):
        value = self.value()
        if not value:
            return queryset
        if value == self.UNTAGGED:
            return queryset.filter(tenant_id__isnull=True)
        return queryset.filter(tenant_id=_tenant_uuid(value))


class ParentFilter(admin.SimpleListFilter):
    """The children of one run; shown only when a run's page links here."""

    title = "parent run"
    parameter_name = "parent"

    def lookups(self, request, model_admin):
        value = self.value()
        return [(value, value)] if value else []

    def queryset(self, request, queryset):
        return queryset.filter(parent_run_id=self.value()) if self.value() else queryset


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


@admin.register(Run)
class RunAdmin(DurableModelAdmin):
    list_display = ("run_id", "colored_status", "function", "attempts_display", "age", "lease", "waiting",
                    "tenant", "created")
    list_filter = ("status", FunctionFilter, TenantFilter, ("created_at", admin.DateFieldListFilter), ParentFilter)
    search_fields = ("run_id",)
    search_help_text = "An exact run id, idempotency key or coalesce key (as it was passed, without a tenant prefix)."
    # The listing index's order; no other sort is offered, so no page sorts the table.
    ordering = ("-created_at", "-run_id")
    sortable_by = ()
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER
    paginator = EstimatedCountPaginator
    list_per_page = 100
    actions = [operation_action(admin_actions.RUN_OPERATIONS, key, "runs")
               for key in admin_actions.RUN_OPERATIONS]
    readonly_fields = ("run_id", "function", "colored_status", "queue_and_priority", "tenant", "keys",
                       "attempts_display", "retry_policy_display", "worker_id", "waiting", "cancellation")
    fieldsets = [
        (None, {"fields": readonly_fields}),
    ]

    class Media:
        css = {"all": ["durable_django/admin.css"]}

    # -- read only ---------------------------------------------------------

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    def has_cancel_permission(self, request, obj=None):
        return request.user.has_perm("durable_django.cancel_run")

    def has_retry_permission(self, request, obj=None):
        return request.user.has_perm("durable_django.retry_run")

    def has_signal_permission(self, request, obj=None):
        return request.user.has_perm("durable_django.signal_run")

    # -- listing -----------------------------------------------------------

    def get_queryset(self, request):
        return super().get_queryset(request).defer(*LARGE_COLUMNS)

    def get_changelist(self, request, **kwargs):
        return RunChangeList

    def get_search_results(self, request, queryset, search_term):
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
            prefixes = [_tenant_uuid(tenant)]
        else:
            prefixes = ["", *overview_store.known_tenants(limit=MAX_TENANTS)]
        # The term itself too, so a key typed with its stored prefix is found as well.
        stored_keys = [term, *(f"{prefix}:{term}" for prefix in prefixes)]
        # Separate lookups so each uses its own index (an OR across them would scan the table).
        runs = Run.objects.using(durable_settings.DATABASE)
        matches = set(runs.filter(run_id=term).values_list("pk", flat=True))
        matches.update(runs.filter(idempotency_key__in=stored_keys).values_list("pk", flat=True))
        coalesced = runs.filter(coalesce_key__in=stored_keys).values_list("pk", flat=True)
        matches.update(coalesced[:MAX_SEARCH_MATCHES])
        return queryset.filter(pk__in=matches), False

    def changelist_view(self, request, extra_context=None):
        extra_context = dict(extra_context or {})
        if request.method == "GET":
            overview = overview_store.overview()
            age = overview.oldest_pending_age
            extra_context.update(overview=overview, oldest_pending_age=compact_duration(age) if age is not None else "")
        return super().changelist_view(request, extra_context)

    @admin.display(description="status")
    def colored_status(self, run):
        return status_badge(run.status)

    @admin.display(description="function")
    def function(self, run):
        return format_html('{} <span class="durable-version">v{}</span>', run.name, run.version)

    @admin.display(description="attempts")
    def attempts_display(self, run):
        notes = []
        if run.failures:
            notes.append(f"{run.failures} failed")
        if run.recoveries:
            notes.append(f"{run.recoveries} recovered")
        if not notes:
            return str(run.attempts)
        return format_html('{} <span class="durable-note">({})</span>', run.attempts, ", ".join(notes))

    @admin.display(description="age")
    def age(self, run):
        return format_html('<span title="{}">{}</span>', moment(run.created_at),
                           compact_duration(timezone.now() - run.created_at))

    @admin.display(description="created at")
    def created(self, run):
        return moment(run.created_at)

    @admin.display(description="lease")
    def lease(self, run):
        if run.status != RunStatus.RUNNING or run.leased_until is None:
            return "—"
        left = run.leased_until - timezone.now()
        holder = run.worker_id or "a worker"
        if left.total_seconds() >= 0:
            return format_html('<span title="held by {}">{} left</span>', holder, compact_duration(left))
        return format_html('<span class="durable-expired" title="held by {}">expired {} ago</span>',
                           holder, compact_duration(left))

    @admin.display(description="waiting for")
    def waiting(self, run):
        return describe_wait(run) or "—"

    @admin.display(description="tenant")
    def tenant(self, run):
        if run.tenant_id is None:
            return "—"
        return format_html('<span title="{}">{}…</span>', run.tenant_id, str(run.tenant_id)[:8])

    # -- a run's page ------------------------------------------------------

    @admin.display(description="queue / priority")
    def queue_and_priority(self, run):
        return f"{run.queue} / {run.priority}"

    @admin.display(description="keys")
    def keys(self, run):
        rows = [(label, shorten(unscope(key)))
                for label, key in (("idempotency", run.idempotency_key), ("coalesce", run.coalesce_key)) if key]
        if not rows:
            return "—"
        return format_html_join(", ", "{}: <code>{}</code>", rows)

    @admin.display(description="retry policy")
    def retry_policy_display(self, run):
        return format_html("<code>{}</code>", json.dumps(run.retry_policy, sort_keys=True))

    @admin.display(description="cancellation")
    def cancellation(self, run):
        parts = [(label, moment(when)) for label, when in (("requested", run.cancel_requested_at),
                                                           ("refused", run.cancel_refused_at),
                                                           ("pivot step journalled", run.pivoted_at)) if when]
        if not parts:
            return "—"
        return format_html_join("; ", "{} at {}", parts)

    def render_change_form(self, request, context, add=False, change=False, form_url="", obj=None):
        if obj is not None:
            context.update(self.run_page_context(request, obj))
        return super().render_change_form(request, context, add, change, form_url, obj)

    def run_page_context(self, request, run: Run) -> dict:
        """Timeline, JSON, tree, journal, signals and the buttons this user may press.

        Large values are cut by PostgreSQL (the run comes without them), and the
        journal shows the page ``?journal_page=`` asks for.
        """
        alias = durable_settings.DATABASE
        values = (Run.objects.using(alias).filter(pk=run.pk)
                  .values(**json_excerpt("input", MAX_JSON_CHARS), **json_excerpt("output", MAX_JSON_CHARS),
                          **error_excerpt()).get())
        run_signals = Signal.objects.using(alias).filter(run_id=run.run_id)
        signal_order = ("created_at", "signal", "occurrence")
        signal_keys = list(run_signals.order_by(*signal_order).values_list("pk", flat=True)[:MAX_SIGNAL_ROWS + 1])
        signals = cut_rows(run_signals, signal_keys, signal_order, "value")
        children = list(Run.objects.using(alias).filter(parent_run_id=run.run_id).order_by("created_at", "run_id")
                        .only("run_id", "name", "version", "status", "created_at")[:MAX_CHILD_ROWS + 1])
        steps = Step.objects.using(alias).filter(run_id=run.run_id)
        step_order = ("created_at", "step_id")
        journal_page = Paginator(steps.order_by(*step_order).values_list("pk", flat=True),
                                 JOURNAL_PAGE_ROWS).get_page(request.GET.get("journal_page"))
        journal = cut_rows(steps, list(journal_page), step_order, "result")
        output = cut_text(values["output_text"], values["output_chars"])
        error = cut_error(values["error_head"], values["error_tail"], values["error_chars"])
        return {
            "run": run,
            "timeline": run_timeline(run),
            "input_json": cut_text(values["input_text"], values["input_chars"]) or "null",
            "error_traceback": readable_traceback(error) if error else None,
            "output_json": output if output is not None else ("null" if run.status == "succeeded" else None),
            "parent_exists": run.parent_run_id and Run.objects.using(alias).filter(pk=run.parent_run_id).exists(),
            "children": [(child, status_badge(child.status)) for child in children[:MAX_CHILD_ROWS]],
            "more_children": len(children) > MAX_CHILD_ROWS,
            "children_url": reverse("admin:durable_django_run_changelist") + "?" + urlencode({"parent": run.run_id}),
            "journal": [journal_row(step, number) for number, step in enumerate(journal, journal_page.start_index())],
            "journal_page": journal_page,
            "signals": [{**signal, "signal": shorten(signal["signal"])} for signal in signals[:MAX_SIGNAL_ROWS]],
            "more_signals": len(signals) > MAX_SIGNAL_ROWS,
            "run_operations": [
                (operation, reverse(f"admin:durable_django_run_{operation.key}", args=[quote(run.run_id)]))
                for operation in admin_actions.RUN_OPERATIONS.values()
                if run.status in operation.offered_for
                and getattr(self, f"has_{operation.permission}_permission")(request, run)
            ],
        }

    # -- operations --------------------------------------------------------

    def get_urls(self):
        urls = [
            path(f"<path:object_id>/{key}/", self.admin_site.admin_view(self.run_operation_view),
                 {"key": key}, name=f"durable_django_run_{key}")
            for key in admin_actions.RUN_OPERATIONS
        ]
        return urls + super().get_urls()

    def operation_form(self, request, operation, runs):
        if operation.form_class is None:
            return None
        confirming = request.POST.get("confirm") == "yes"
        initial = operation.form_class.initial_for(runs[0].waiting_for) if len(runs) == 1 else {}
        return operation.form_class(request.POST if confirming else None, initial=initial)

    def bulk_operation(self, request, queryset, operation):
        """Confirm, then perform one operation on each selected run and list every outcome."""
        runs = list(queryset.defer(*HEAVY_COLUMNS)[: admin_actions.MAX_ACTION_TARGETS + 1])
        if len(runs) > admin_actions.MAX_ACTION_TARGETS:
            self.message_user(request, f"Select at most {admin_actions.MAX_ACTION_TARGETS} runs for one action; "
                                       "narrow the filters.", level=messages.ERROR)
            return None
        # The confirmation posts the listed ids to the unfiltered listing: exactly these runs, no others.
        outcomes, confirmation = admin_actions.confirm_then_perform(
            self, request, operation=operation, targets=runs, describe=describe_run, bulk=True,
            form=self.operation_form(request, operation, runs),
            hidden=[("action", f"{operation.key}_runs"), ("index", "0")],
            confirm_url=reverse("admin:durable_django_run_changelist"), back_url=request.get_full_path(),
        )
        if confirmation is not None:
            return confirmation
        return admin_actions.outcomes_response(self, request, operation=operation, targets=runs, outcomes=outcomes)

    def run_operation_view(self, request, object_id, key):
        """The button on a run's page: confirm, perform, and return to the run with its outcome."""
        operation = admin_actions.RUN_OPERATIONS[key]
        permitted = getattr(self, f"has_{operation.permission}_permission")
        if not (self.has_view_permission(request) and permitted(request)):
            raise PermissionDenied
        run = self.get_object(request, unquote(object_id))
        if run is None:
            raise Http404(f"no run {object_id}")
        here = run_url(run.run_id)
        outcomes, confirmation = admin_actions.confirm_then_perform(
            self, request, operation=operation, targets=[run], describe=describe_run,
            form=self.operation_form(request, operation, [run]), back_url=here,
        )
        if confirmation is not None:
            return confirmation
        admin_actions.message_outcome(self, request, operation, outcomes[0])
        return HttpResponseRedirect(run_url(outcomes[0].new_run_id) if outcomes[0].new_run_id else here)


def describe_run(run: Run):
    return format_html("{} v{} {}", run.name, run.version, status_badge(run.status))


def run_timeline(run: Run) -> list[tuple[str, object, str]]:
    """(label, when, note) rows of a run's life, in order, skipping what has not happened."""
    rows = [
        ("created", run.created_at, ""),
        ("available at", run.available_at, "not claimed before this" if run.status == "pending" else "deadline"),
        ("first claimed", run.started_at, _since(run.created_at, run.started_at, "after creation")),
        ("last claimed", run.claimed_at, f"attempt {run.attempts}" + (f" by {run.worker_id}" if run.worker_id else "")),
        ("leased until", run.leased_until if run.status == "running" else None, "the holder renews it while alive"),
        ("cancel requested", run.cancel_requested_at, ""),
        ("cancel refused", run.cancel_refused_at, ""),
        ("finished", run.finished_at, _since(run.started_at or run.created_at, run.finished_at, "after start")),
        ("updated", run.updated_at, ""),
    ]
    return [(label, moment(when), note) for label, when, note in rows if when is not None]


def _since(start, end, words: str) -> str:
    if start is None or end is None:
        return ""
    return f"{compact_duration(end - start)} {words}"


def cut_rows(queryset, keys: list, ordering: tuple, field: str) -> list[dict]:
    """The rows of ``keys`` in ``ordering``, each with its jsonb ``field`` as indented text cut in SQL.

    The caller picks the keys first, so PostgreSQL never indents a value that
    its sort or page would then throw away.
    """
    rows = queryset.filter(pk__in=keys).order_by(*ordering).values(
        *(column for column in ordering if column != field), **json_excerpt(field, MAX_CELL_CHARS, "value"))
    return [{**row, "value": cut_text(row.pop("value_text"), row.pop("value_chars"))} for row in rows]


def journal_row(step: dict, number: int) -> dict:
    """A journal entry with its step id ``v{version}:{name}:{occurrence}[#deadline]`` taken apart."""
    step_id, _, suffix = step["step_id"].partition("#")
    version, _, rest = step_id.partition(":")
    name, _, occurrence = rest.rpartition(":")
    return {
        "number": number,
        "step_id": step["step_id"],
        "name": shorten(name or step_id),
        "occurrence": occurrence,
        "version": version.lstrip("v"),
        "kind": suffix,
        "created_at": step["created_at"],
        "result": step["value"],
    }


class ScheduleForm(forms.ModelForm):
    """A schedule as the API takes it; cron and zone are validated here, the write goes through ``schedule()``."""

    key = forms.CharField(label="Schedule id", max_length=200,
                          help_text="Unique per tenant; the id you pass to schedule() and unschedule().")
    tenant = forms.UUIDField(required=False, help_text="Leave empty for the untagged namespace.")
    name = forms.ChoiceField(label="Function", choices=())
    cron = forms.CharField(max_length=200, help_text="Five fields (minute hour day month weekday), six with "
                                                     "seconds first, or an alias such as @daily.")
    tz = forms.CharField(label="Time zone", initial="UTC", max_length=100,
                         help_text="An IANA zone such as Europe/Berlin; the cron's times are wall-clock times there.")
    input = admin_actions.JSONValueField(required=False, help_text="The JSON input of every run; empty is null.")
    enabled = forms.BooleanField(required=False, initial=True)

    class Meta:
        model = Schedule
        fields = ()

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        names = registry.names()
        stored = self.instance if self.instance.pk else None
        if stored is not None and stored.name not in names:
            names = sorted([*names, stored.name])
        self.fields["name"].choices = [(name, name) for name in names]
        if stored is not None:
            # The id and tenant are the schedule's identity: changing them would make another schedule.
            self.initial.update(
                key=unscope(stored.schedule_id), tenant=stored.tenant_id, name=stored.name, cron=stored.cron,
                tz=stored.tz or "UTC", input=json.dumps(stored.input, ensure_ascii=False), enabled=stored.enabled,
            )
            self.fields["key"].disabled = True
            self.fields["tenant"].disabled = True

    def clean_name(self):
        # A stored schedule may name a function this web process does not register; schedule() would refuse it.
        name = self.cleaned_data["name"]
        try:
            registry.newest(name)
        except UnknownFunction:
            raise forms.ValidationError(
                f"No function {name!r} is registered in this web process, so this schedule cannot be saved here "
                "(it can still be enabled and disabled)."
            ) from None
        return name

    def clean_tz(self):
        tz = self.cleaned_data["tz"].strip()
        try:
            cron_math.zone(tz)
        except InvalidSchedule as exc:
            raise forms.ValidationError(str(exc)) from None
        return tz

    def clean(self):
        cleaned = super().clean()
        if "cron" in cleaned:
            # With a bad zone the expression is still checked (in UTC), so both errors show at once.
            try:
                cleaned["cron"] = cron_math.parse(cleaned["cron"], cleaned.get("tz", "UTC")).expression
            except InvalidSchedule as exc:
                self.add_error("cron", str(exc))
        # schedule() is an upsert: an add must never become a change (the add permission allows no change).
        adding = not self.instance.pk and "key" in cleaned and "tenant" in cleaned
        if adding and Schedule.objects.using(durable_settings.DATABASE).filter(pk=self.stored_id()).exists():
            self.add_error("key", "A schedule with this id already exists in this tenant; change it on its own page.")
        return cleaned

    def stored_id(self) -> str:
        """The id the schedule is stored under: the key scoped by its tenant."""
        tenant = self.cleaned_data["tenant"]
        return scope(self.cleaned_data["key"], normalize_tenant(tenant), what="schedule_id")


class ScheduleTaken(Exception):
    """A schedule with the id being added was created after the add form was validated."""


def next_fire_in_zone(schedule: Schedule) -> str:
    """The next fire time as wall-clock time in the schedule's own zone, with its offset."""
    try:
        zone = cron_math.zone(schedule.tz or "UTC")
    except InvalidSchedule:
        zone = ZoneInfo("UTC")  # a corrupt stored zone; firing postpones the schedule and says why
    local = schedule.next_fire_at.astimezone(zone)
    return f"{local:%Y-%m-%d %H:%M:%S} {local.tzname()} ({zone.key})"


@admin.register(Schedule)
class ScheduleAdmin(DurableModelAdmin):
    form = ScheduleForm
    fields = ("key", "tenant", "name", "cron", "tz", "input", "enabled")
    list_display = ("key", "name", "cron", "zone", "next_fire", "enabled", "tenant", "source",
                    "last_fired")
    list_filter = ("enabled", "source", FunctionFilter)
    ordering = ("next_fire_at", "schedule_id")
    search_fields = ("schedule_id",)
    search_help_text = "An exact schedule id (as it was passed, without a tenant prefix)."
    show_facets = admin.ShowFacets.NEVER
    actions = [operation_action(admin_actions.SCHEDULE_OPERATIONS, key, "schedules")
               for key in admin_actions.SCHEDULE_OPERATIONS]

    class Media:
        css = {"all": ["durable_django/admin.css"]}

    def has_fire_permission(self, request, obj=None):
        return request.user.has_perm("durable_django.fire_schedule")

    def has_change_permission(self, request, obj=None):
        # DURABLE["SCHEDULES"] owns the definition of a settings schedule; only enable/disable applies.
        if obj is not None and obj.source == schedules_api.SETTINGS_SOURCE:
            return False
        return super().has_change_permission(request, obj)

    def has_delete_permission(self, request, obj=None):
        if obj is not None and obj.source == schedules_api.SETTINGS_SOURCE:
            return False
        return super().has_delete_permission(request, obj)

    def get_search_results(self, request, queryset, search_term):
        """The id as passed, under any tenant's prefix (schedules are few: a suffix match is cheap)."""
        term = search_term.strip()
        if not term:
            return queryset, False
        return queryset.filter(schedule_id__endswith=f":{term}") | queryset.filter(schedule_id=term), False

    @admin.display(description="schedule id", ordering="schedule_id")
    def key(self, schedule):
        return unscope(schedule.schedule_id)

    @admin.display(description="zone")
    def zone(self, schedule):
        return schedule.tz or "UTC"

    @admin.display(description="next fire (its zone)", ordering="next_fire_at")
    def next_fire(self, schedule):
        text = next_fire_in_zone(schedule)
        if not schedule.enabled:
            return format_html('<span class="durable-note">{} (disabled)</span>', text)
        return format_html('<span title="{} UTC">{}</span>', schedule.next_fire_at.strftime("%Y-%m-%d %H:%M:%S"), text)

    @admin.display(description="tenant")
    def tenant(self, schedule):
        return str(schedule.tenant_id) if schedule.tenant_id else "—"

    @admin.display(description="last fired", ordering="last_fired_at")
    def last_fired(self, schedule):
        return moment(schedule.last_fired_at) if schedule.last_fired_at else "—"

    # -- writes go through the schedules API -------------------------------

    def save_model(self, request, obj, form, change):
        data = form.cleaned_data
        tenant = str(data["tenant"]) if data.get("tenant") else None
        with transaction.atomic(using=durable_settings.DATABASE):
            stored = schedules_api.schedule(
                data["key"], data["name"], data["cron"], input=data["input"], tz=data["tz"], tenant_id=tenant,
                enabled=data["enabled"],
            )
            # A row this statement inserted was created and updated at this transaction's now(); an older
            # created_at means the upsert replaced a schedule added since the form was validated: undo it.
            if not change and stored.created_at != stored.updated_at:
                raise ScheduleTaken(f"A schedule {data['key']!r} was added in this tenant meanwhile; "
                                    "nothing was saved.")
        fresh = Schedule.objects.using(durable_settings.DATABASE).get(pk=form.stored_id())
        for field in Schedule._meta.concrete_fields:
            setattr(obj, field.attname, getattr(fresh, field.attname))

    def changeform_view(self, request, object_id=None, form_url="", extra_context=None):
        """The add or change page; an add undone by ``save_model`` is reported back on the add page."""
        try:
            return super().changeform_view(request, object_id, form_url, extra_context)
        except ScheduleTaken as exc:
            self.message_user(request, str(exc), messages.ERROR)
            return HttpResponseRedirect(request.get_full_path())

    def save_related(self, request, form, formsets, change):
        """A schedule has no related objects; ``save_model`` wrote everything there is."""

    def delete_model(self, request, obj):
        schedule_id, tenant_id = admin_actions.schedule_address(obj)
        schedules_api.unschedule(schedule_id, tenant_id=tenant_id)

    def delete_queryset(self, request, queryset):
        for schedule in queryset:
            self.delete_model(request, schedule)

    # -- operations --------------------------------------------------------

    def get_urls(self):
        return [
            path("<path:object_id>/fire/", self.admin_site.admin_view(self.fire_view),
                 name="durable_django_schedule_fire"),
            *super().get_urls(),
        ]

    def render_change_form(self, request, context, add=False, change=False, form_url="", obj=None):
        if obj is not None and self.has_fire_permission(request, obj):
            context["fire_url"] = reverse("admin:durable_django_schedule_fire", args=[quote(obj.pk)])
        if obj is not None:
            context["next_fire_in_zone"] = next_fire_in_zone(obj)
        return super().render_change_form(request, context, add, change, form_url, obj)

    def bulk_operation(self, request, queryset, operation):
        schedules = list(queryset[: admin_actions.MAX_ACTION_TARGETS + 1])
        if len(schedules) > admin_actions.MAX_ACTION_TARGETS:
            self.message_user(request, f"Select at most {admin_actions.MAX_ACTION_TARGETS} schedules for one action.",
                              level=messages.ERROR)
            return None
        outcomes, confirmation = admin_actions.confirm_then_perform(
            self, request, operation=operation, targets=schedules, describe=describe_schedule, bulk=True,
            hidden=[("action", f"{operation.key}_schedules"), ("index", "0")],
            confirm_url=reverse("admin:durable_django_schedule_changelist"), back_url=request.get_full_path(),
        )
        if confirmation is not None:
            return confirmation
        return admin_actions.outcomes_response(self, request, operation=operation, targets=schedules,
                                               outcomes=outcomes)

    def fire_view(self, request, object_id):
        """The "Fire now" button on a schedule's page: confirm, fire, and show the run it enqueued."""
        if not (self.has_view_permission(request) and self.has_fire_permission(request)):
            raise PermissionDenied
        schedule = self.get_object(request, unquote(object_id))
        if schedule is None:
            raise Http404(f"no schedule {object_id}")
        operation = admin_actions.SCHEDULE_OPERATIONS["fire"]
        schedule_url = reverse("admin:durable_django_schedule_change", args=[quote(schedule.pk)])
        outcomes, confirmation = admin_actions.confirm_then_perform(
            self, request, operation=operation, targets=[schedule], describe=describe_schedule,
            back_url=schedule_url,
        )
        if confirmation is not None:
            return confirmation
        admin_actions.message_outcome(self, request, operation, outcomes[0])
        return HttpResponseRedirect(run_url(outcomes[0].new_run_id) if outcomes[0].new_run_id else schedule_url)


def describe_schedule(schedule: Schedule):
    return format_html("{} <code>{}</code> {}", schedule.name, schedule.cron, schedule.tz or "UTC")
