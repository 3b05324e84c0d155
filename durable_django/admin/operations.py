"""What an operator action is, and the pages around it: the confirmation before it runs, the outcomes after.

The admin lists and shows records through the models; every change it makes
goes through an ``Operation`` (``run_operations``, ``schedule_operations``,
``control``), one API call per run or schedule, each in its own transaction,
so one refusal never undoes another run's cancel. An action is always
confirmed on an intermediate page before it runs, and the confirmation posts
back exactly the ids it listed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import django
from django import forms
from django.contrib import messages
from django.contrib.admin import helpers
from django.db.models import Model
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.utils.translation import gettext as _

from ..models import Run

if TYPE_CHECKING:  # only for the annotations: base imports this module's Operation the same way
    from django_stubs_ext import StrOrPromise

    from .base import DurableModelAdmin

# The record an operation acts on: a run or a schedule.
_R = TypeVar("_R", bound=Model)

# An action over more records than this is refused: narrow the filters instead.
MAX_ACTION_TARGETS = 500

# Django 6.1's admin draws breadcrumbs as an ordered list (and styles only that); earlier releases a div.
ORDERED_BREADCRUMBS = django.VERSION >= (6, 1)


@dataclass(frozen=True, slots=True, kw_only=True)
class ActionResult:
    """What one action did to one run or schedule, as the operator reads it."""

    label: str
    detail: str = ""
    ok: bool = True
    # A run the action created (retry, fire now).
    new_run_id: str | None = None


class OperationForm(forms.Form):
    """The parameters of an operation, confirmed with it; prefilled for (and checked against) the run it acts
    on, when it acts on one."""

    def __init__(self, *args: Any, run: Run | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.run = run

    @classmethod
    def initial_for(cls, run: Run, request: HttpRequest) -> dict[str, object]:
        return {}


@dataclass(frozen=True, slots=True, kw_only=True)
class Operation(Generic[_R]):
    """One thing an operator can do: who may, what the confirmation says, and the API call."""

    key: str
    # The texts an operator reads, translated when shown.
    verb: StrOrPromise
    action_description: StrOrPromise
    # The ModelAdmin's has_<permission>_permission decides who may.
    permission: str
    explanation: StrOrPromise
    perform: Callable[[_R, dict[str, Any]], ActionResult]
    # Runs whose page offers this as a button (the bulk action reports the others' refusals).
    offered_for: frozenset[str] = frozenset()
    form_class: type[OperationForm] | None = None
    # Whether a run whose status it is offered for is offered it (None: every such run).
    offered_when: Callable[[Run], bool] | None = None
    # Offered as an action on the list (else only on a run's page).
    bulk: bool = True

    def offered(self, record: Run) -> bool:
        """Does the record's page offer this operation as a button?"""
        return record.status in self.offered_for and (self.offered_when is None or self.offered_when(record))


def by_key(*operations: Operation[_R]) -> dict[str, Operation[_R]]:
    """Operations by their keys, the names of their actions and URLs."""
    return {operation.key: operation for operation in operations}


# -- confirmation and outcome pages ------------------------------------------


def confirm_then_perform(
    model_admin: DurableModelAdmin[_R],
    request: HttpRequest,
    *,
    operation: Operation[_R],
    targets: list[_R],
    describe: Callable[[_R], str],
    back_url: str,
    form: forms.Form | None = None,
    hidden: Sequence[tuple[str, str]] = (),
    confirm_url: str | None = None,
    bulk: bool = False,
    extra_context: dict[str, Any] | None = None,
) -> tuple[list[ActionResult], None] | tuple[None, TemplateResponse]:
    """Render the confirmation page, or, once confirmed, perform the operation on every target.

    Args:
        model_admin: the ModelAdmin the action belongs to (for context and the audit log).
        request: the current request; a POST with ``confirm=yes`` performs.
        operation: the :class:`Operation`.
        targets: model instances to act on (already capped by the caller).
        describe: target -> safe HTML that tells the operator what it is.
        back_url: where "No, take me back" leads.
        form: an unbound or bound form of the operation's parameters, or None.
        hidden: extra (name, value) pairs the confirmation form posts back.
        confirm_url: where the confirmation posts; the current URL when None.
        bulk: post the targets' ids back as the admin action's selection.
        extra_context: more for the template (``every_match``: the filters of an operation on every match).

    Returns:
        ``(outcomes, None)`` once performed, else ``(None, the confirmation response)``.
    """
    confirmed = request.method == "POST" and request.POST.get("confirm") == "yes"
    if confirmed and (form is None or form.is_valid()):
        data = form.cleaned_data if form is not None else {}
        outcomes: list[ActionResult] = []
        for target in targets:
            outcome = operation.perform(target, data)
            outcomes.append(outcome)
            model_admin.log_change(
                request,
                target,
                (
                    _("%(verb)s: %(outcome)s. %(detail)s")
                    % {"verb": operation.verb, "outcome": outcome.label, "detail": outcome.detail}
                ).strip(),
            )
        return outcomes, None
    opts = model_admin.model._meta
    context = {
        **model_admin.admin_site.each_context(request),
        "ordered_breadcrumbs": ORDERED_BREADCRUMBS,
        "title": _("%(verb)s: are you sure?") % {"verb": operation.verb},
        "opts": opts,
        "operation": operation,
        "rows": [(target, describe(target)) for target in targets],
        "form": form,
        "hidden": hidden,
        "bulk": bulk,
        "confirm_url": confirm_url or request.get_full_path(),
        "back_url": back_url,
        "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        **(extra_context or {}),
    }
    return None, TemplateResponse(request, "admin/durable_django/confirm_operation.html", context)


def outcomes_response(
    model_admin: DurableModelAdmin[_R],
    request: HttpRequest,
    *,
    operation: Operation[_R],
    targets: list[_R],
    outcomes: list[ActionResult],
) -> TemplateResponse:
    """The page that lists what a bulk action did to each target."""
    summary: dict[str, int] = {}
    for outcome in outcomes:
        summary[outcome.label] = summary.get(outcome.label, 0) + 1
    model_admin.message_user(
        request,
        _("%(verb)s: %(counts)s")
        % {
            "verb": operation.verb,
            "counts": ", ".join(
                _("%(count)s %(label)s") % {"count": count, "label": label} for label, count in summary.items()
            ),
        },
        messages.SUCCESS if all(outcome.ok for outcome in outcomes) else messages.WARNING,
    )
    context = {
        **model_admin.admin_site.each_context(request),
        "ordered_breadcrumbs": ORDERED_BREADCRUMBS,
        "title": _("%(verb)s: outcome") % {"verb": operation.verb},
        "opts": model_admin.model._meta,
        "operation": operation,
        "rows": list(zip(targets, outcomes, strict=True)),
    }
    return TemplateResponse(request, "admin/durable_django/operation_outcomes.html", context)


def message_outcome(
    model_admin: DurableModelAdmin[_R], request: HttpRequest, operation: Operation[_R], outcome: ActionResult
) -> None:
    """Report one target's outcome as a message on the page the operator returns to."""
    text = _("%(verb)s: %(outcome)s") % {"verb": operation.verb, "outcome": outcome.label}
    if outcome.detail:
        text += f" ({outcome.detail})"
    if outcome.new_run_id:
        text += _("; new run %(run_id)s") % {"run_id": outcome.new_run_id}
    model_admin.message_user(request, text, messages.SUCCESS if outcome.ok else messages.WARNING)
