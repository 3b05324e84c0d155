"""What an operator does to runs from the admin: the buttons of a run's page, the listing's actions, and
the live part of a run's page, each under a URL of ``RunAdmin``.

Every operation is confirmed on an intermediate page and then performed
through the client API (``operations``); a bulk action acts on the runs listed
for confirmation (at most ``MAX_ACTION_TARGETS``), or, with "select all", on
every run the filters match, as a durable run (``bulk``).
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.translation import gettext as _

from ..api import bulk as bulk_api
from ..models import Run
from . import bulk, operations
from .base import DurableModelAdmin
from .control import ALL_RUN_OPERATIONS
from .display import run_url, status_badge
from .run_chart import live_context
from .run_columns import HEAVY_COLUMNS


class RunActions(DurableModelAdmin[Run]):
    """The URLs and views of ``RunAdmin`` that act on runs, and its live view."""

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


def describe_run(run: Run) -> SafeString:
    return format_html("{} v{} {}", run.name, run.version, status_badge(run.status))
