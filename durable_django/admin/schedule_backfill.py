"""Backfill from a schedule's page: a start and an end in the schedule's zone, a confirmation that says
how many ticks that is, then the runs it made."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from django import forms
from django.contrib import messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, ngettext

from ..api import schedules as api_schedules
from ..engine import cron as cron_math
from ..engine import schedule_ticks
from ..exceptions import DurableError, InvalidSchedule
from ..models import Schedule
from . import schedule_urls
from .schedule_operations import schedule_address

if TYPE_CHECKING:
    from .schedule_actions import ScheduleActions

_FORMATS = ["%Y-%m-%d %H:%M", "%Y-%m-%d %H:%M:%S", "%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d"]


class BackfillForm(forms.Form):
    """A range of ticks, as wall-clock times in the schedule's own zone."""

    start = forms.CharField(
        label=gettext_lazy("Start"),
        help_text=gettext_lazy("From this time (included), e.g. 2026-11-30 00:00, in the schedule's zone."),
    )
    end = forms.CharField(
        label=gettext_lazy("End"), help_text=gettext_lazy("Up to this time (excluded), no later than now.")
    )

    def __init__(self, *args: Any, schedule: Schedule, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.schedule = schedule
        self.ticks: list[datetime] = []

    def _instant(self, name: str) -> datetime:
        text = self.cleaned_data[name].strip()
        for fmt in _FORMATS:
            try:
                wall = datetime.strptime(text, fmt)
            except ValueError:
                continue
            try:
                return wall.replace(tzinfo=cron_math.zone(self.schedule.tz or "UTC"))
            except InvalidSchedule as exc:
                raise forms.ValidationError(str(exc)) from None
        raise forms.ValidationError(_("Enter a time as YYYY-MM-DD HH:MM."))

    def clean_start(self) -> datetime:
        return self._instant("start")

    def clean_end(self) -> datetime:
        return self._instant("end")

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        assert cleaned is not None
        start, end = cleaned.get("start"), cleaned.get("end")
        if isinstance(start, datetime) and isinstance(end, datetime):
            if start >= end:
                self.add_error("end", _("The end must come after the start."))
                return cleaned
            try:
                spec = cron_math.parse(self.schedule.cron, self.schedule.tz or "UTC")
            except InvalidSchedule as exc:
                raise forms.ValidationError(str(exc)) from None
            self.ticks = schedule_ticks.backfill_ticks(spec, start, end)
            if len(self.ticks) > schedule_ticks.MAX_BACKFILL_TICKS:
                self.add_error(
                    "end",
                    _("That is more than %(count)s ticks; narrow it.") % {"count": schedule_ticks.MAX_BACKFILL_TICKS},
                )
        return cleaned


def backfill_view(admin: ScheduleActions, request: HttpRequest, object_id: str) -> HttpResponse:
    """GET: the form; POST: the confirmation; POST with ``confirm``: the backfill, then back to the schedule."""
    if not (admin.has_view_permission(request) and admin.has_fire_permission(request)):
        raise PermissionDenied
    schedule = admin.get_object(request, unquote(object_id))
    if schedule is None:
        raise Http404(f"no schedule {object_id}")
    schedule_url = schedule_urls.schedule_url(schedule)
    form = BackfillForm(request.POST if request.method == "POST" else None, schedule=schedule)
    confirming = False
    if request.method == "POST" and form.is_valid():
        if request.POST.get("confirm") == "yes":
            schedule_id, tenant_id = schedule_address(schedule)
            try:
                made = api_schedules.backfill(
                    schedule_id, form.cleaned_data["start"], form.cleaned_data["end"], tenant_id=tenant_id
                )
            except DurableError as exc:
                form.add_error(None, str(exc))
            else:
                runs = ngettext("%(count)s run", "%(count)s runs", len(made)) % {"count": len(made)}
                ticks = ngettext("%(count)s tick", "%(count)s ticks", len(form.ticks)) % {"count": len(form.ticks)}
                admin.message_user(
                    request,
                    _(
                        "Backfill made %(runs)s for %(ticks)s; ticks that had a run already, or that the overlap "
                        "policy skipped, made none."
                    )
                    % {"runs": runs, "ticks": ticks},
                    messages.SUCCESS,
                )
                return HttpResponseRedirect(schedule_url)
        else:
            confirming = True
    context = {
        **admin.admin_site.each_context(request),
        "opts": admin.model._meta,
        "title": _("Backfill %(schedule)s") % {"schedule": schedule_id_of(schedule)},
        "schedule": schedule,
        "form": form,
        "confirming": confirming,
        "tick_count": len(form.ticks),
        "first_tick": form.ticks[0] if form.ticks else None,
        "last_tick": form.ticks[-1] if form.ticks else None,
        "back_url": schedule_url,
    }
    return TemplateResponse(request, "admin/durable_django/schedule/backfill.html", context)


def schedule_id_of(schedule: Schedule) -> str:
    return schedule_address(schedule)[0]
