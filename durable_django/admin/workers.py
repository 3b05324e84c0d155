"""The workers page: live workers and those gone within the last day, what each holds, and the versions.

A worker records itself in ``durable_worker`` when it starts and with every
heartbeat, and marks itself stopped when it stops gracefully; one that was
killed stops being seen and counts as gone three leases later. The runs each
worker holds are read in one statement for the whole page, through the index
of running runs; the versions section is the health check's (bounded) reading
of the due runs no live worker can run.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.contrib import admin
from django.contrib.admin.views.main import ChangeList
from django.db.models import BooleanField, Case, OrderBy, Q, QuerySet, Value, When
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from ..api import operations as api_operations
from ..conf import durable_settings
from ..models import Run, Worker
from ..states import RunStatus
from .base import DurableModelAdmin
from .display import compact_duration, moment, run_link

# "Recently gone": gone within this long.
GONE_WINDOW = timedelta(days=1)
# Runs listed per worker (the count says how many it holds).
MAX_HELD_SHOWN = 10


def gone() -> Case:
    """False for a live worker: not stopped, and seen within three leases (the health check's rule)."""
    seen_since = timezone.now() - timedelta(seconds=3 * float(durable_settings.LEASE_SECONDS))
    live = Q(stopped_at__isnull=True, last_seen_at__gte=seen_since)
    return Case(When(live, then=Value(False)), default=Value(True), output_field=BooleanField())


class WorkerChangeList(ChangeList):
    """Reads the runs the listed workers hold, in one statement, once the page's workers are known."""

    def get_results(self, request: HttpRequest) -> None:
        super().get_results(request)
        workers = list(self.result_list)
        held: dict[str, list[str]] = {worker.worker_id: [] for worker in workers}
        running = Run.objects.using(durable_settings.read_database).filter(
            status=RunStatus.RUNNING, worker_id__in=list(held)
        )
        for worker_id, run_id in running.values_list("worker_id", "run_id"):
            if worker_id is not None:
                held[worker_id].append(run_id)
        for worker in workers:
            worker.held_runs = sorted(held[worker.worker_id])


@admin.register(Worker)
class WorkerAdmin(DurableModelAdmin[Worker]):
    list_display = (
        "worker_id",
        "state",
        "host",
        "pid",
        "concurrency",
        "queues_display",
        "functions_display",
        "started",
        "last_seen",
        "runs_held",
    )
    list_display_links = None
    sortable_by = ()
    list_per_page = 100
    show_full_result_count = False
    search_fields = ("host", "worker_id")
    search_help_text = gettext_lazy("A host name or worker id.")
    actions = None

    class Media:
        css = {"all": ["durable_django/admin.css"]}
        js = ["durable_django/autorefresh.js"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Worker | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Worker | None = None) -> bool:
        return False

    def get_queryset(self, request: HttpRequest) -> QuerySet[Worker]:
        return (
            super().get_queryset(request).filter(last_seen_at__gte=timezone.now() - GONE_WINDOW).annotate(gone=gone())
        )

    def get_ordering(self, request: HttpRequest) -> tuple[str | OrderBy, ...]:
        # Live workers first, newest first.
        return (gone().asc(), "-started_at", "worker_id")

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return WorkerChangeList

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        extra_context = dict(extra_context or {})
        if request.method == "GET":
            live_versions, unserved = api_operations.versions_overview()
            extra_context.update(live_versions=live_versions, unserved_versions=unserved)
        return super().changelist_view(request, extra_context)

    @admin.display(description=gettext_lazy("state"))
    def state(self, worker: Worker) -> str:
        if not getattr(worker, "gone", True):
            return format_html('<span class="durable-status durable-status-running">{}</span>', _("live"))
        if worker.stopped_at is not None:
            return format_html(
                '<span class="durable-worker-gone">{}</span>',
                _("stopped at %(when)s") % {"when": moment(worker.stopped_at)},
            )
        return format_html(
            '<span class="durable-expired">{}</span>',
            _("not seen for %(duration)s") % {"duration": compact_duration(timezone.now() - worker.last_seen_at)},
        )

    @admin.display(description=gettext_lazy("queues"))
    def queues_display(self, worker: Worker) -> str:
        return ", ".join(worker.queues) if worker.queues else _("all")

    @admin.display(description=gettext_lazy("functions"))
    def functions_display(self, worker: Worker) -> str:
        functions: dict[str, list[int]] = worker.functions or {}
        if not functions:
            return "—"
        return format_html_join(
            ", ",
            "{} <span class='durable-version'>{}</span>",
            sorted((name, _versions(v)) for name, v in functions.items()),
        )

    @admin.display(description=gettext_lazy("started"))
    def started(self, worker: Worker) -> str:
        return moment(worker.started_at)

    @admin.display(description=gettext_lazy("last seen"))
    def last_seen(self, worker: Worker) -> str:
        return format_html(
            '<span title="{}">{}</span>',
            moment(worker.last_seen_at),
            _("%(duration)s ago") % {"duration": compact_duration(timezone.now() - worker.last_seen_at)},
        )

    @admin.display(description=gettext_lazy("runs held"))
    def runs_held(self, worker: Worker) -> str:
        held: list[str] = getattr(worker, "held_runs", [])
        if not held:
            return "—"
        links = format_html_join(" ", "{}", ((run_link(run_id, run_id[:8] + "…"),) for run_id in held[:MAX_HELD_SHOWN]))
        more = _(" and %(count)s more") % {"count": len(held) - MAX_HELD_SHOWN} if len(held) > MAX_HELD_SHOWN else ""
        return format_html("{} {}{}", len(held), links, more)


def _versions(versions: list[int]) -> str:
    return "v" + ", v".join(str(version) for version in versions)
