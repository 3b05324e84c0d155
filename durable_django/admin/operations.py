"""What the admin's operator actions do: each calls the client API and reports an outcome.

The admin lists and shows records through the models; every change it makes
goes through here, one API call per run or schedule, each in its own
transaction, so one refusal never undoes another run's cancel. An action is
always confirmed on an intermediate page before it runs, and the confirmation
posts back exactly the ids it listed.
"""

from __future__ import annotations

import json
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
from django.utils.translation import gettext_lazy

from .. import api
from ..exceptions import DurableError, InvalidInput, RunNotFound
from ..journal_ids import WaitingFor
from ..models import Run, Schedule
from ..states import LIVE_STATUSES, TERMINAL_STATUSES, CancelOutcome, RunStatus
from ..tenancy import unscope
from .display import outcome_word
from .fields import JSONValueField, NameField, StoredIntegerField

if TYPE_CHECKING:  # only for the annotations: base imports this module's Operation the same way
    from django_stubs_ext import StrOrPromise

    from .base import DurableModelAdmin

# The record an operation acts on: a run or a schedule.
_R = TypeVar("_R", bound=Model)

# An action over more records than this is refused: narrow the filters instead.
MAX_ACTION_TARGETS = 500

# Django 6.1's admin draws breadcrumbs as an ordered list (and styles only that); earlier releases a div.
ORDERED_BREADCRUMBS = django.VERSION >= (6, 1)

RESUMABLE = frozenset({RunStatus.FAILED, RunStatus.CANCELLED})


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


class SignalForm(OperationForm):
    """The signal an operator emits: name, occurrence and JSON value."""

    signal = NameField(
        label=gettext_lazy("Signal"), help_text=gettext_lazy("The name the run waits on, e.g. approval.")
    )
    occurrence = StoredIntegerField(
        label=gettext_lazy("Occurrence"),
        min_value=0,
        initial=0,
        help_text=gettext_lazy("Which emission of this signal (0 is the first)."),
    )
    value = JSONValueField(
        label=gettext_lazy("Value"), required=False, help_text=gettext_lazy("Any JSON value; empty sends null.")
    )

    @classmethod
    def initial_for(cls, run: Run, request: HttpRequest) -> dict[str, object]:
        """Prefill from the signal a waiting run waits for, if it waits for one."""
        try:
            wait = WaitingFor.parse(run.waiting_for or "")
        except ValueError:
            return {}
        return {"signal": wait.target, "occurrence": wait.occurrence} if wait.kind == WaitingFor.SIGNAL else {}


# -- runs ------------------------------------------------------------------

_CANCEL_LABEL = {
    CancelOutcome.CANCELLED: gettext_lazy("cancelled"),
    CancelOutcome.REQUESTED: gettext_lazy("requested"),
    CancelOutcome.REFUSED: gettext_lazy("refused"),
}
_CANCEL_DETAIL = {
    CancelOutcome.CANCELLED: gettext_lazy("the run and its unfinished descendants are cancelled"),
    CancelOutcome.REQUESTED: gettext_lazy("the run is running: it stops at its next step or heartbeat"),
    CancelOutcome.REFUSED: gettext_lazy("already finished, or past a pivot step: nothing changed"),
}


def not_found() -> ActionResult:
    """The outcome of an operation on a run that no longer exists (in the language of the request)."""
    return ActionResult(label=_("not found"), detail=_("the run no longer exists"), ok=False)


def cancel_run(record: Run, data: dict[str, Any]) -> ActionResult:
    """``cancel()`` one run: cancelled, requested or refused."""
    try:
        outcome = api.cancel(record.run_id)
    except RunNotFound:
        return not_found()
    return ActionResult(
        label=str(_CANCEL_LABEL[outcome]),
        detail=str(_CANCEL_DETAIL[outcome]),
        ok=outcome != CancelOutcome.REFUSED,
    )


def resume_run(record: Run, data: dict[str, Any]) -> ActionResult:
    """``resume()`` a failed or cancelled run, journal intact."""
    try:
        run = api.resume(record.run_id)
    except RunNotFound:
        return not_found()
    except InvalidInput as exc:
        return ActionResult(label=_("refused"), detail=str(exc), ok=False)
    return ActionResult(
        label=_("resumed"),
        detail=_("the run is %(status)s again, its journal kept") % {"status": outcome_word(run.status)},
    )


def retry_run(record: Run, data: dict[str, Any]) -> ActionResult:
    """Enqueue a new run of the same function, version, input, tenant, queue and priority."""
    run = api.get_run(record.run_id)
    if run is None:
        return not_found()
    if run.status not in TERMINAL_STATUSES:
        return ActionResult(
            label=_("refused"), detail=_("the run is still %(status)s") % {"status": outcome_word(run.status)}, ok=False
        )
    try:
        new = api.retry_as_new_run(run.run_id)
    except DurableError as exc:
        return ActionResult(label=_("refused"), detail=str(exc), ok=False)
    return ActionResult(label=_("retried"), detail=_("a new run with the same input"), new_run_id=new.run_id)


def signal_run(record: Run, data: dict[str, Any]) -> ActionResult:
    """``emit_signal()`` to one run; the first committed value of (run, signal, occurrence) wins."""
    try:
        stored = api.emit_signal(record.run_id, data["signal"], data["value"], occurrence=data["occurrence"])
    except RunNotFound:
        return not_found()
    except InvalidInput as exc:
        return ActionResult(label=_("refused"), detail=str(exc), ok=False)
    text = json.dumps(stored, ensure_ascii=False)
    if stored != data["value"]:
        return ActionResult(
            label=_("already sent"), detail=_("an earlier value was kept: %(value)s") % {"value": text}, ok=False
        )
    return ActionResult(label=_("signal stored"), detail=f"{data['signal']}#{data['occurrence']} = {text}")


# -- schedules ---------------------------------------------------------------


def schedule_address(record: Schedule) -> tuple[str, str | None]:
    """A stored schedule as the API addresses it: the id as it was passed, and its tenant."""
    return unscope(record.schedule_id), (str(record.tenant_id) if record.tenant_id else None)


def _set_enabled(enabled: bool) -> Callable[[Schedule, dict[str, Any]], ActionResult]:
    def perform(record: Schedule, data: dict[str, Any]) -> ActionResult:
        schedule_id, tenant_id = schedule_address(record)
        try:
            schedule = api.set_schedule_enabled(schedule_id, enabled, tenant_id=tenant_id)
        except InvalidInput as exc:
            return ActionResult(label=_("not found"), detail=str(exc), ok=False)
        return ActionResult(
            label=_("enabled") if enabled else _("disabled"),
            detail=(
                _("next fire at %(when)s UTC") % {"when": f"{schedule.next_fire_at:%Y-%m-%d %H:%M:%S}"}
                if enabled
                else _("no next fire")
            ),
        )

    return perform


def fire_schedule(record: Schedule, data: dict[str, Any]) -> ActionResult:
    """``fire_schedule_now()``: one run now, the regular ticks left as they are."""
    schedule_id, tenant_id = schedule_address(record)
    try:
        run = api.fire_schedule_now(schedule_id, tenant_id=tenant_id)
    except DurableError as exc:
        return ActionResult(label=_("refused"), detail=str(exc), ok=False)
    return ActionResult(
        label=_("fired"), detail=_("a run of %(function)s was enqueued") % {"function": run.name}, new_run_id=run.run_id
    )


# -- the operations ----------------------------------------------------------


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


def _by_key(*operations: Operation[_R]) -> dict[str, Operation[_R]]:
    return {operation.key: operation for operation in operations}


RUN_OPERATIONS = _by_key(
    Operation(
        key="cancel",
        verb=gettext_lazy("Cancel"),
        action_description=gettext_lazy("Cancel the selected runs"),
        permission="cancel",
        perform=cancel_run,
        offered_for=LIVE_STATUSES,
        # A cancel already requested (the run stops at its next step) or refused (past a pivot) stays so.
        offered_when=lambda run: run.cancel_requested_at is None and run.cancel_refused_at is None,
        explanation=gettext_lazy(
            "Pending and waiting runs are cancelled now, with their unfinished descendants; running "
            "runs are asked to stop at their next step; finished runs and runs past a pivot step refuse."
        ),
    ),
    Operation(
        key="resume",
        verb=gettext_lazy("Resume"),
        action_description=gettext_lazy("Resume the selected runs"),
        permission="retry",
        perform=resume_run,
        offered_for=RESUMABLE,
        explanation=gettext_lazy(
            "Failed, cancelled and parked runs go back to pending with their journal intact, so completed "
            "steps are not run again, and a fresh failure budget."
        ),
    ),
    Operation(
        key="retry",
        verb=gettext_lazy("Retry as a new run"),
        action_description=gettext_lazy("Retry the selected runs as new runs"),
        permission="retry",
        perform=retry_run,
        offered_for=TERMINAL_STATUSES,
        explanation=gettext_lazy(
            "Each finished run is submitted again as a new run of the same function version, with "
            "the same input, tenant, queue and priority and an empty journal."
        ),
    ),
    Operation(
        key="signal",
        verb=gettext_lazy("Send a signal"),
        action_description=gettext_lazy("Send a signal to the selected runs"),
        permission="signal",
        perform=signal_run,
        offered_for=LIVE_STATUSES,
        form_class=SignalForm,
        explanation=gettext_lazy(
            "The signal is stored for each run (the first value sent wins) and wakes a run waiting "
            "on exactly that signal and occurrence."
        ),
    ),
)

SCHEDULE_OPERATIONS = _by_key(
    Operation(
        key="enable",
        verb=gettext_lazy("Enable"),
        action_description=gettext_lazy("Enable the selected schedules"),
        permission="change",
        perform=_set_enabled(True),
        explanation=gettext_lazy(
            "Enabled schedules fire at their next tick; ticks that passed while they were disabled are not fired."
        ),
    ),
    Operation(
        key="disable",
        verb=gettext_lazy("Disable"),
        action_description=gettext_lazy("Disable the selected schedules"),
        permission="change",
        perform=_set_enabled(False),
        explanation=gettext_lazy("Disabled schedules keep their definition and fire nothing until enabled again."),
    ),
    Operation(
        key="fire",
        verb=gettext_lazy("Fire now"),
        action_description=gettext_lazy("Fire the selected schedules now"),
        permission="fire",
        perform=fire_schedule,
        explanation=gettext_lazy(
            "Each schedule enqueues one run now, enabled or not; its regular ticks stay as they are."
        ),
    ),
)


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
