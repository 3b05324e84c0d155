"""The schedules admin: listing, the add and change form (validated here, written through the API), and
enable, disable and fire now."""

from __future__ import annotations

import json
from typing import Any
from zoneinfo import ZoneInfo

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from .. import storable
from ..api import schedules as api_schedules
from ..conf import durable_settings
from ..engine import cron as cron_math
from ..engine.schedule_ticks import OVERLAP_POLICIES
from ..exceptions import InvalidInput, InvalidSchedule, UnknownFunction
from ..models import Schedule
from ..registry import registry
from ..tenancy import normalize_tenant, scope, unscope
from . import operations, schedule_backfill, schedule_page, schedule_urls
from .base import DurableModelAdmin, operation_action
from .display import moment, run_url
from .fields import JSONValueField, NameField, StorableTextField
from .filters import FunctionFilter, searchable
from .schedule_operations import SCHEDULE_OPERATIONS, schedule_address


# ModelForm is generic only in django-stubs: Django's class cannot be subscripted at run time.
class ScheduleForm(forms.ModelForm):  # type: ignore[type-arg]
    """A schedule as the API takes it; cron and zone are validated here, the write goes through ``schedule()``."""

    key = NameField(
        label=gettext_lazy("Schedule id"),
        help_text=gettext_lazy("Unique per tenant; the id you pass to schedule() and unschedule()."),
    )
    tenant = forms.UUIDField(
        label=gettext_lazy("Tenant"), required=False, help_text=gettext_lazy("Leave empty for the untagged namespace.")
    )
    name = forms.ChoiceField(label=gettext_lazy("Function"), choices=())
    cron = StorableTextField(
        label=gettext_lazy("Cron"),
        max_length=200,
        help_text=gettext_lazy(
            "Five fields (minute hour day month weekday), six with seconds first, or an alias such as @daily."
        ),
    )
    # Offered from a list; typed values are still checked by clean_tz (a form error, never a 500).
    tz = forms.CharField(
        label=gettext_lazy("Time zone"),
        initial="UTC",
        max_length=100,
        widget=forms.Select(),
        help_text=gettext_lazy("An IANA zone such as Europe/Berlin; the cron's times are wall-clock times there."),
    )
    input = JSONValueField(
        label=gettext_lazy("Input"),
        required=False,
        help_text=gettext_lazy("The JSON input of every run; empty is null."),
    )
    enabled = forms.BooleanField(label=gettext_lazy("Enabled"), required=False, initial=True)
    overlap = forms.ChoiceField(
        label=gettext_lazy("Overlap"),
        required=False,
        initial="allow_all",
        choices=[(policy, policy) for policy in OVERLAP_POLICIES],
        help_text=gettext_lazy(
            "What a tick does while a run of this schedule is live: allow_all (a run per tick), skip, "
            "buffer_one (one waits for it) or cancel_previous."
        ),
    )
    catchup_window = forms.DurationField(
        label=gettext_lazy("Catchup window"),
        required=False,
        help_text=gettext_lazy(
            "After downtime, every tick missed within this window fires (e.g. 01:00:00); empty fires the one owed tick."
        ),
    )
    jitter = forms.DurationField(
        label=gettext_lazy("Jitter"),
        required=False,
        help_text=gettext_lazy("Each tick's run is due at a random instant within this after the tick."),
    )
    pause_on_failure = forms.BooleanField(
        label=gettext_lazy("Pause on failure"),
        required=False,
        help_text=gettext_lazy("A failed run of the schedule disables it."),
    )

    class Meta:
        model = Schedule
        fields = ()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        names = registry.names()
        stored = self.instance if self.instance.pk else None
        if stored is not None and stored.name not in names:
            names = sorted([*names, stored.name])
        name_field = self.fields["name"]
        assert isinstance(name_field, forms.ChoiceField)  # declared above; ``fields`` holds a deep copy
        name_field.choices = [(name, name) for name in names]
        tz_widget = self.fields["tz"].widget
        assert isinstance(tz_widget, forms.Select)
        tz_widget.choices = schedule_page.zone_choices(stored.tz if stored is not None else None)
        if stored is not None:
            # The id and tenant are the schedule's identity: changing them would make another schedule.
            self.initial.update(
                key=unscope(stored.schedule_id),
                tenant=stored.tenant_id,
                name=stored.name,
                cron=stored.cron,
                tz=stored.tz or "UTC",
                input=json.dumps(stored.input, ensure_ascii=False),
                enabled=stored.enabled,
                overlap=stored.overlap,
                catchup_window=stored.catchup_window,
                jitter=stored.jitter,
                pause_on_failure=stored.pause_on_failure,
            )
            self.fields["key"].disabled = True
            self.fields["tenant"].disabled = True

    def clean_name(self) -> str:
        # A stored schedule may name a function this web process does not register; schedule() would refuse it.
        name: str = self.cleaned_data["name"]
        try:
            registry.newest(name)
        except UnknownFunction:
            raise forms.ValidationError(
                _(
                    "No function %(function)s is registered in this web process, so this schedule cannot be saved "
                    "here (it can still be enabled and disabled)."
                )
                % {"function": repr(name)}
            ) from None
        return name

    def clean_tz(self) -> str:
        tz: str = self.cleaned_data["tz"].strip()
        try:
            cron_math.zone(tz)
            storable.zone(tz, what="the time zone")
        except (InvalidInput, InvalidSchedule) as exc:
            raise forms.ValidationError(str(exc)) from None
        return tz

    def clean(self) -> dict[str, Any]:
        # ModelForm.clean() returns cleaned_data itself, never None (the stubs allow None for Form.clean overrides).
        cleaned = super().clean()
        assert cleaned is not None
        if "cron" in cleaned:
            # With a bad zone the expression is still checked (in UTC), so both errors show at once.
            try:
                cleaned["cron"] = cron_math.parse(cleaned["cron"], cleaned.get("tz", "UTC")).expression
            except InvalidSchedule as exc:
                self.add_error("cron", str(exc))
        # schedule() is an upsert: an add must never become a change (the add permission allows no change).
        adding = not self.instance.pk and "key" in cleaned and "tenant" in cleaned
        if adding and Schedule.objects.using(durable_settings.DATABASE).filter(pk=self.stored_id()).exists():
            self.add_error(
                "key", _("A schedule with this id already exists in this tenant; change it on its own page.")
            )
        return cleaned

    def stored_id(self) -> str:
        """The id the schedule is stored under: the key scoped by its tenant."""
        tenant = self.cleaned_data["tenant"]
        key: str = self.cleaned_data["key"]
        return scope(key, normalize_tenant(tenant), what="schedule_id")


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
class ScheduleAdmin(DurableModelAdmin[Schedule]):
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

    def has_fire_permission(self, request: HttpRequest, obj: Schedule | None = None) -> bool:
        return request.user.has_perm("durable_django.fire_schedule")

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

    # -- operations --------------------------------------------------------

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
