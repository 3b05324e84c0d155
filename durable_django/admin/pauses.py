"""The pauses page: what is paused, a form to pause a function or a queue, and unpausing by deleting.

Adding and deleting go through the client API (``pause``, ``unpause``), for users
with the pause permission; nothing is written through the model.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from .. import api
from ..api.pauses import check_target
from ..exceptions import InvalidInput
from ..models import Pause
from .base import DurableModelAdmin

PAUSE_PERMISSION = "durable_django.pause_run"


class PauseForm(forms.ModelForm):  # type: ignore[type-arg]  # ModelForm is generic only in django-stubs
    """A function or a queue (exactly one) and why; checked as ``pause()`` checks them."""

    class Meta:
        model = Pause
        fields = ("function", "queue", "reason")
        help_texts = {
            "function": gettext_lazy("The durable function's registered name, e.g. crm.sync."),
            "queue": gettext_lazy("Or a queue: every function's runs in it."),
            "reason": gettext_lazy("Shown on this page, by the workers and by durable_health."),
        }

    def clean(self) -> dict[str, Any]:
        data: dict[str, Any] = super().clean() or {}
        function, queue = data.get("function") or None, data.get("queue") or None
        try:
            check_target(function, queue)
        except InvalidInput as exc:
            raise forms.ValidationError(str(exc)) from None
        data["function"], data["queue"], data["reason"] = function, queue, data.get("reason") or ""
        return data


@admin.register(Pause)
class PauseAdmin(DurableModelAdmin[Pause]):
    form = PauseForm
    list_display = ("key", "function", "queue", "reason", "created_at")
    ordering = ("created_at", "key")
    actions = ["unpause_selected"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(PAUSE_PERMISSION)

    def has_change_permission(self, request: HttpRequest, obj: Pause | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Pause | None = None) -> bool:
        return request.user.has_perm(PAUSE_PERMISSION)

    def get_actions(self, request: HttpRequest, action_location: Any = None) -> dict[str, Any]:
        # Django 6.1 passes where the actions are offered (and asks overrides to name it); earlier releases
        # know no such argument.
        located = [] if action_location is None else [action_location]
        actions: dict[str, Any] = super().get_actions(request, *located)
        actions.pop("delete_selected", None)  # unpause_selected says what deleting a pause does
        return actions

    def save_model(self, request: HttpRequest, obj: Pause, form: forms.Form, change: bool) -> None:
        data = form.cleaned_data
        pause = api.pause(function=data["function"], queue=data["queue"], reason=data["reason"])
        obj.key, obj.created_at = pause.key, pause.created_at

    def delete_model(self, request: HttpRequest, obj: Pause) -> None:
        api.unpause(function=obj.function, queue=obj.queue)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Pause]) -> None:
        for pause in queryset:
            self.delete_model(request, pause)

    @admin.action(permissions=["delete"], description=gettext_lazy("Unpause the selected functions and queues"))
    def unpause_selected(self, request: HttpRequest, queryset: QuerySet[Pause]) -> None:
        pauses = list(queryset)
        self.delete_queryset(request, queryset)
        keys = ", ".join(pause.key for pause in pauses) or _("nothing")
        self.message_user(request, _("Unpaused: %(keys)s") % {"keys": keys})
