"""What an operator does to schedules from the admin: enable, disable and fire now as the listing's
actions, and the "Fire now" and "Backfill" buttons of a schedule's page, each under a URL of
``ScheduleAdmin``.

Every operation is confirmed on an intermediate page and then performed
through the client API (``operations``, ``schedule_operations``); a backfill
has its page of its own (``schedule_backfill``).
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

from ..models import Schedule
from . import operations, schedule_backfill, schedule_urls
from .base import DurableModelAdmin
from .display import run_url
from .schedule_operations import SCHEDULE_OPERATIONS


class ScheduleActions(DurableModelAdmin[Schedule]):
    """The URLs and views of ``ScheduleAdmin`` that act on schedules."""

    def has_fire_permission(self, request: HttpRequest, obj: Schedule | None = None) -> bool:
        return request.user.has_perm("durable_django.fire_schedule")

    def get_urls(self) -> list[URLPattern]:
        return [
            path(
                "<path:object_id>/fire/",
                self.admin_site.admin_view(self.fire_view),
                name="durable_django_schedule_fire",
            ),
            path(
                "<path:object_id>/backfill/",
                self.admin_site.admin_view(self.backfill_view),
                name="durable_django_schedule_backfill",
            ),
            *super().get_urls(),
        ]

    def bulk_operation(
        self, request: HttpRequest, queryset: QuerySet[Schedule], operation: operations.Operation[Schedule]
    ) -> TemplateResponse | None:
        schedules = list(queryset[: operations.MAX_ACTION_TARGETS + 1])
        if len(schedules) > operations.MAX_ACTION_TARGETS:
            self.message_user(
                request,
                _("Select at most %(count)s schedules for one action.") % {"count": operations.MAX_ACTION_TARGETS},
                level=messages.ERROR,
            )
            return None
        outcomes, confirmation = operations.confirm_then_perform(
            self,
            request,
            operation=operation,
            targets=schedules,
            describe=describe_schedule,
            bulk=True,
            hidden=[("action", f"{operation.key}_schedules"), ("index", "0")],
            confirm_url=reverse("admin:durable_django_schedule_changelist"),
            back_url=request.get_full_path(),
        )
        if confirmation is not None:
            return confirmation
        assert outcomes is not None, "confirm_then_perform gives outcomes or a confirmation page"
        return operations.outcomes_response(self, request, operation=operation, targets=schedules, outcomes=outcomes)

    def backfill_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """The "Backfill" button on a schedule's page (its own module)."""
        return schedule_backfill.backfill_view(self, request, object_id)

    def fire_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """The "Fire now" button on a schedule's page: confirm, fire, and show the run it enqueued."""
        if not (self.has_view_permission(request) and self.has_fire_permission(request)):
            raise PermissionDenied
        schedule = self.get_object(request, unquote(object_id))
        if schedule is None:
            raise Http404(f"no schedule {object_id}")
        operation = SCHEDULE_OPERATIONS["fire"]
        schedule_url = schedule_urls.schedule_url(schedule)
        outcomes, confirmation = operations.confirm_then_perform(
            self,
            request,
            operation=operation,
            targets=[schedule],
            describe=describe_schedule,
            back_url=schedule_url,
        )
        if confirmation is not None:
            return confirmation
        assert outcomes is not None, "confirm_then_perform gives outcomes or a confirmation page"
        operations.message_outcome(self, request, operation, outcomes[0])
        return HttpResponseRedirect(run_url(outcomes[0].new_run_id) if outcomes[0].new_run_id else schedule_url)


def describe_schedule(schedule: Schedule) -> SafeString:
    return format_html("{} <code>{}</code> {}", schedule.name, schedule.cron, schedule.tz or "UTC")
