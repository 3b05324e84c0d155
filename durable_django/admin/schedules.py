"""The schedules admin: the listing, and a schedule's add and change page, whose writes go through the API.

Its form is ``schedule_form``; enable, disable, fire now and backfill are
``schedule_actions``; what a schedule's page shows besides the form is
``schedule_page``. A schedule defined in ``DURABLE["SCHEDULES"]`` is owned by
the settings: it can be enabled and disabled here, not changed or deleted.
"""

from __future__ import annotations

from typing import Any
from zoneinfo import ZoneInfo

from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.contrib.admin.views.main import ChangeList
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.utils.html import format_html
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from ..api import schedules as api_schedules
from ..conf import durable_settings
from ..engine import cron as cron_math
from ..exceptions import InvalidInput, InvalidSchedule
from ..models import Schedule
from ..tenancy import unscope
from . import schedule_page, schedule_urls
from .base import operation_action
from .display import moment
from .filters import FunctionFilter, searchable
from .schedule_actions import ScheduleActions
from .schedule_form import ScheduleForm
from .schedule_operations import SCHEDULE_OPERATIONS, schedule_address

# What a disabled schedule shows for its next fire.
DISABLED = gettext_lazy("—, disabled")


def next_fire_in_zone(schedule: Schedule, *, with_zone: bool = True) -> str:
    """The next fire time as wall-clock time in the schedule's own zone, with its offset (and the zone's name)."""
    try:
        zone = cron_math.zone(schedule.tz or "UTC")
    except InvalidSchedule:
        zone = ZoneInfo("UTC")  # a corrupt stored zone; firing postpones the schedule and says why
    local = schedule.next_fire_at.astimezone(zone)
    text = f"{local:%Y-%m-%d %H:%M:%S} {local.tzname()}"
    return f"{text} ({zone.key})" if with_zone else text


@admin.register(Schedule)
class ScheduleAdmin(ScheduleActions):
    """Schedules: the listing, the add and change page written through the API; operations from
    ``ScheduleActions``."""

    form = ScheduleForm
    fields = (
        "key", "tenant", "name", "cron", "tz", "input", "enabled", "overlap", "catchup_window", "jitter",
        "pause_on_failure",
    )  # fmt: skip
    # Short cells, so the listing fits a laptop's window: the tenant under the id, the cron with its zone.
    list_display = ("key", "name", "in_words", "next_fire", "overlap", "source", "last_fired")
    list_filter = ("enabled", "source", FunctionFilter)
    ordering = ("next_fire_at", "schedule_id")
    search_fields = ("schedule_id",)
    search_help_text = gettext_lazy("An exact schedule id (as it was passed, without a tenant prefix).")
    show_facets = admin.ShowFacets.NEVER
    actions = [operation_action(SCHEDULE_OPERATIONS, key, "schedules") for key in SCHEDULE_OPERATIONS]

    class Media:
        css = {"all": ["durable_django/admin.css"]}

    def has_change_permission(self, request: HttpRequest, obj: Schedule | None = None) -> bool:
        # DURABLE["SCHEDULES"] owns the definition of a settings schedule; only enable/disable applies.
        if obj is not None and obj.source == api_schedules.SETTINGS_SOURCE:
            return False
        return super().has_change_permission(request, obj)

    def has_delete_permission(self, request: HttpRequest, obj: Schedule | None = None) -> bool:
        if obj is not None and obj.source == api_schedules.SETTINGS_SOURCE:
            return False
        return super().has_delete_permission(request, obj)

    def get_object(self, request: HttpRequest, object_id: str, from_field: str | None = None) -> Schedule | None:
        """The schedule an address names: its own id when untagged, else its stored id (see schedule_urls)."""
        return super().get_object(request, schedule_urls.stored_id(object_id), from_field)

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return schedule_urls.ScheduleChangeList

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Schedule], search_term: str
    ) -> tuple[QuerySet[Schedule], bool]:
        """The id as passed, under any tenant's prefix, or as stored (schedules are few: a suffix match is cheap).

        A suffix match alone would also find ids that only end in the term (``nightly:report`` for
        ``report``): a candidate counts when the id after its tenant prefix is the term itself.
        """
        term = search_term.strip()
        if not term:
            return queryset, False
        if not searchable(term):
            return queryset.none(), False
        candidates = queryset.filter(schedule_id__endswith=f":{term}").values_list("schedule_id", flat=True)
        matches = [stored for stored in candidates if unscope(stored) == term]
        return queryset.filter(schedule_id__in=[*matches, term]), False

    @admin.display(description=gettext_lazy("schedule id"), ordering="schedule_id")
    def key(self, schedule: Schedule) -> str:
        """The id as it was passed (the stored tenant prefix left out), and under it the tenant if it has one."""
        if schedule.tenant_id is None:
            return unscope(schedule.schedule_id)
        tenant = str(schedule.tenant_id)
        return format_html(
            '{}<br><span class="durable-note durable-tenant" title="{}">{}</span>',
            unscope(schedule.schedule_id),
            _("tenant %(tenant)s") % {"tenant": tenant},
            _("tenant %(tenant)s…") % {"tenant": tenant[:8]},
        )

    @admin.display(description=gettext_lazy("when"))
    def in_words(self, schedule: Schedule) -> str:
        when = format_html(
            '<code>{}</code> {}<br><span class="durable-note">{}</span>',
            schedule.cron,
            schedule_page.cron_in_words(schedule),
            schedule.tz or "UTC",
        )
        if schedule.paused_reason and not schedule.enabled:
            return format_html(
                '{} <span class="durable-note durable-paused-reason">{}</span>',
                when,
                _("paused: %(reason)s") % {"reason": schedule.paused_reason},
            )
        return when

    @admin.display(description=gettext_lazy("next fire (its zone)"), ordering="next_fire_at")
    def next_fire(self, schedule: Schedule) -> str:
        # A disabled schedule keeps the next_fire_at it had, which has passed or will: it fires nothing.
        if not schedule.enabled:
            return format_html('<span class="durable-note durable-disabled">{}</span>', DISABLED)
        return format_html(
            '<span title="{} UTC">{}</span>',
            schedule.next_fire_at.strftime("%Y-%m-%d %H:%M:%S"),
            next_fire_in_zone(schedule, with_zone=False),
        )

    @admin.display(description=gettext_lazy("last fired"), ordering="last_fired_at")
    def last_fired(self, schedule: Schedule) -> str:
        return moment(schedule.last_fired_at) if schedule.last_fired_at else "—"

    # -- writes go through the schedules API -------------------------------

    def save_model(self, request: HttpRequest, obj: Schedule, form: ScheduleForm, change: bool) -> None:
        data = form.cleaned_data
        tenant = str(data["tenant"]) if data.get("tenant") else None
        # An add only ever creates: the add permission allows no change, even to a schedule added meanwhile.
        write = api_schedules.schedule if change else api_schedules.create_schedule
        write(
            data["key"],
            data["name"],
            data["cron"],
            input=data["input"],
            tz=data["tz"],
            tenant_id=tenant,
            enabled=data["enabled"],
            overlap=data["overlap"] or "allow_all",
            catchup_window=data["catchup_window"],
            jitter=data["jitter"],
            pause_on_failure=data["pause_on_failure"],
        )
        fresh = Schedule.objects.using(durable_settings.DATABASE).get(pk=form.stored_id())
        for field in Schedule._meta.concrete_fields:
            setattr(obj, field.attname, getattr(fresh, field.attname))

    def changeform_view(
        self,
        request: HttpRequest,
        object_id: str | None = None,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        """The add or change page; an add refused by ``create_schedule`` is reported back on the add page.

        A link that still carries the stored id of an untagged schedule (``:hourly-greet``) is redirected to
        the schedule's own address.
        """
        if object_id is not None and (moved := schedule_urls.redirect_to_address(request, unquote(object_id))):
            return moved
        try:
            return super().changeform_view(request, object_id, form_url, extra_context)
        except InvalidInput as exc:
            self.message_user(request, _("Nothing was saved: %(error)s.") % {"error": exc}, messages.ERROR)
            return HttpResponseRedirect(request.get_full_path())

    def save_related(self, request: HttpRequest, form: ScheduleForm, formsets: Any, change: bool) -> None:
        """A schedule has no related objects; ``save_model`` wrote everything there is."""

    def delete_model(self, request: HttpRequest, obj: Schedule) -> None:
        schedule_id, tenant_id = schedule_address(obj)
        api_schedules.unschedule(schedule_id, tenant_id=tenant_id)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        for schedule in queryset:
            self.delete_model(request, schedule)

    # -- a schedule's page -------------------------------------------------

    def render_change_form(
        self,
        request: HttpRequest,
        context: dict[str, Any],
        add: bool = False,
        change: bool = False,
        form_url: str = "",
        obj: Schedule | None = None,
    ) -> HttpResponse:
        if obj is not None and self.has_fire_permission(request, obj):
            context["fire_url"] = schedule_urls.schedule_url(obj, "fire")
            context["backfill_url"] = schedule_urls.schedule_url(obj, "backfill")
        if obj is not None:
            context["next_fire_in_zone"] = next_fire_in_zone(obj) if obj.enabled else DISABLED
            context.update(schedule_page.page_context(obj))
        return super().render_change_form(request, context, add, change, form_url, obj)
