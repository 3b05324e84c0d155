"""The form of a schedule's add and change pages: the schedule as ``schedule()`` takes it, validated here.

The cron and the zone are checked as the API would check them, so an operator
reads a form error, never a 500; an add never becomes a change of a schedule
added meanwhile; the write itself is ``ScheduleAdmin.save_model``'s, through
the API.
"""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from .. import storable
from ..conf import durable_settings
from ..engine import cron as cron_math
from ..engine.schedule_ticks import OVERLAP_POLICIES
from ..exceptions import InvalidInput, InvalidSchedule, UnknownFunction
from ..models import Schedule
from ..registry import registry
from ..tenancy import normalize_tenant, scope, unscope
from . import schedule_page
from .fields import JSONValueField, NameField, StorableTextField


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
