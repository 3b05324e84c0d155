"""The schedules admin: listing, the add and change form (validated here, written through the API), and
enable, disable and fire now."""

from __future__ import annotations

import json
from typing import Any
from zoneinfo import ZoneInfo

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.utils import quote, unquote
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from ..api import schedules as api_schedules
from ..conf import durable_settings
from ..engine import cron as cron_math
from ..exceptions import InvalidInput, InvalidSchedule, UnknownFunction
from ..models import Schedule
from ..registry import registry
from ..tenancy import normalize_tenant, scope, unscope
from . import operations
from .base import DurableModelAdmin, operation_action
from .display import moment, run_url
from .filters import FunctionFilter


# ModelForm is generic only in django-stubs: Django's class cannot be subscripted at run time.
class ScheduleForm(forms.ModelForm):  # type: ignore[type-arg]
    """A schedule as the API takes it; cron and zone are validated here, the write goes through ``schedule()``."""

    key = forms.CharField(
        label="Schedule id",
        max_length=200,
        help_text="Unique per tenant; the id you pass to schedule() and unschedule().",
    )
    tenant = forms.UUIDField(required=False, help_text="Leave empty for the untagged namespace.")
    name = forms.ChoiceField(label="Function", choices=())
    cron = forms.CharField(
        max_length=200,
        help_text="Five fields (minute hour day month weekday), six with seconds first, or an alias such as @daily.",
    )
    tz = forms.CharField(
        label="Time zone",
        initial="UTC",
        max_length=100,
        help_text="An IANA zone such as Europe/Berlin; the cron's times are wall-clock times there.",
    )
    input = operations.JSONValueField(required=False, help_text="The JSON input of every run; empty is null.")
    enabled = forms.BooleanField(required=False, initial=True)

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
                f"No function {name!r} is registered in this web process, so this schedule cannot be saved here "
                "(it can still be enabled and disabled)."
            ) from None
        return name

    def clean_tz(self) -> str:
        tz: str = self.cleaned_data["tz"].strip()
        try:
            cron_math.zone(tz)
        except InvalidSchedule as exc:
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
            self.add_error("key", "A schedule with this id already exists in this tenant; change it on its own page.")
        return cleaned

    def stored_id(self) -> str:
        """The id the schedule is stored under: the key scoped by its tenant."""
        tenant = self.cleaned_data["tenant"]
        key: str = self.cleaned_data["key"]
        return scope(key, normalize_tenant(tenant), what="schedule_id")


def next_fire_in_zone(schedule: Schedule) -> str:
    """The next fire time as wall-clock time in the schedule's own zone, with its offset."""
    try:
        zone = cron_math.zone(schedule.tz or "UTC")
    except InvalidSchedule:
        zone = ZoneInfo("UTC")  # a corrupt stored zone; firing postpones the schedule and says why
    local = schedule.next_fire_at.astimezone(zone)
    return f"{local:%Y-%m-%d %H:%M:%S} {local.tzname()} ({zone.key})"


@admin.register(Schedule)
class ScheduleAdmin(DurableModelAdmin[Schedule]):
    form = ScheduleForm
    fields = ("key", "tenant", "name", "cron", "tz", "input", "enabled")
    list_display = ("key", "name", "cron", "zone", "next_fire", "enabled", "tenant", "source", "last_fired")
    list_filter = ("enabled", "source", FunctionFilter)
    ordering = ("next_fire_at", "schedule_id")
    search_fields = ("schedule_id",)
    search_help_text = "An exact schedule id (as it was passed, without a tenant prefix)."
    show_facets = admin.ShowFacets.NEVER
    actions = [
        operation_action(operations.SCHEDULE_OPERATIONS, key, "schedules") for key in operations.SCHEDULE_OPERATIONS
    ]

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

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Schedule], search_term: str
    ) -> tuple[QuerySet[Schedule], bool]:
        """The id as passed, under any tenant's prefix (schedules are few: a suffix match is cheap)."""
        term = search_term.strip()
        if not term:
            return queryset, False
        return queryset.filter(schedule_id__endswith=f":{term}") | queryset.filter(schedule_id=term), False

    @admin.display(description="schedule id", ordering="schedule_id")
    def key(self, schedule: Schedule) -> str:
        return unscope(schedule.schedule_id)

    @admin.display(description="zone")
    def zone(self, schedule: Schedule) -> str:
        return schedule.tz or "UTC"

    @admin.display(description="next fire (its zone)", ordering="next_fire_at")
    def next_fire(self, schedule: Schedule) -> str:
        text = next_fire_in_zone(schedule)
        if not schedule.enabled:
            return format_html('<span class="durable-note">{} (disabled)</span>', text)
        return format_html('<span title="{} UTC">{}</span>', schedule.next_fire_at.strftime("%Y-%m-%d %H:%M:%S"), text)

    @admin.display(description="tenant")
    def tenant(self, schedule: Schedule) -> str:
        return str(schedule.tenant_id) if schedule.tenant_id else "—"

    @admin.display(description="last fired", ordering="last_fired_at")
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
        """The add or change page; an add refused by ``create_schedule`` is reported back on the add page."""
        try:
            return super().changeform_view(request, object_id, form_url, extra_context)
        except InvalidInput as exc:
            self.message_user(request, f"Nothing was saved: {exc}.", messages.ERROR)
            return HttpResponseRedirect(request.get_full_path())

    def save_related(self, request: HttpRequest, form: ScheduleForm, formsets: Any, change: bool) -> None:
        """A schedule has no related objects; ``save_model`` wrote everything there is."""

    def delete_model(self, request: HttpRequest, obj: Schedule) -> None:
        schedule_id, tenant_id = operations.schedule_address(obj)
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
            context["fire_url"] = reverse("admin:durable_django_schedule_fire", args=[quote(obj.pk)])
        if obj is not None:
            context["next_fire_in_zone"] = next_fire_in_zone(obj)
        return super().render_change_form(request, context, add, change, form_url, obj)

    def bulk_operation(
        self, request: HttpRequest, queryset: QuerySet[Schedule], operation: operations.Operation[Schedule]
    ) -> TemplateResponse | None:
        schedules = list(queryset[: operations.MAX_ACTION_TARGETS + 1])
        if len(schedules) > operations.MAX_ACTION_TARGETS:
            self.message_user(
                request,
                f"Select at most {operations.MAX_ACTION_TARGETS} schedules for one action.",
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

    def fire_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """The "Fire now" button on a schedule's page: confirm, fire, and show the run it enqueued."""
        if not (self.has_view_permission(request) and self.has_fire_permission(request)):
            raise PermissionDenied
        schedule = self.get_object(request, unquote(object_id))
        if schedule is None:
            raise Http404(f"no schedule {object_id}")
        operation = operations.SCHEDULE_OPERATIONS["fire"]
        schedule_url = reverse("admin:durable_django_schedule_change", args=[quote(schedule.pk)])
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
