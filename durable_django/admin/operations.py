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

from django import forms
from django.contrib import messages
from django.contrib.admin import helpers
from django.db.models import Model
from django.http import HttpRequest
from django.template.response import TemplateResponse

from .. import api
from ..exceptions import DurableError, InvalidInput, RunNotFound
from ..journal_ids import WaitingFor
from ..models import Run, Schedule
from ..states import LIVE_STATUSES, TERMINAL_STATUSES, CancelOutcome, RunStatus
from ..tenancy import unscope
from ..values import json_text

if TYPE_CHECKING:  # only for the annotations: base imports this module's Operation the same way
    from .base import DurableModelAdmin

# The record an operation acts on: a run or a schedule.
_R = TypeVar("_R", bound=Model)

# An action over more records than this is refused: narrow the filters instead.
MAX_ACTION_TARGETS = 500

RESUMABLE = frozenset({RunStatus.FAILED, RunStatus.CANCELLED})


@dataclass(frozen=True, slots=True, kw_only=True)
class Outcome:
    """What one action did to one run or schedule, as the operator reads it."""

    label: str
    detail: str = ""
    ok: bool = True
    # A run the action created (retry, fire now).
    new_run_id: str | None = None


class JSONValueField(forms.CharField):
    """A JSON document typed into a textarea; empty means null."""

    widget = forms.Textarea(attrs={"rows": 4, "cols": 60, "class": "vLargeTextField"})

    def to_python(self, value: Any) -> Any:
        # CharField gives its empty_value ("" here) for an empty input, never None.
        text = (super().to_python(value) or "").strip()
        if not text:
            return None
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            raise forms.ValidationError(f"not valid JSON: {exc}") from None
        try:
            json_text(value, what="the value")  # what the API will refuse (a NUL PostgreSQL cannot store)
        except InvalidInput as exc:
            raise forms.ValidationError(str(exc)) from None
        return value


class SignalForm(forms.Form):
    """The signal an operator emits: name, occurrence and JSON value."""

    signal = forms.CharField(max_length=200, help_text="The name the run waits on, e.g. approval.")
    occurrence = forms.IntegerField(min_value=0, initial=0, help_text="Which emission of this signal (0 is the first).")
    value = JSONValueField(required=False, help_text="Any JSON value; empty sends null.")

    @staticmethod
    def initial_for(waiting_for: str | None) -> dict[str, object]:
        """Prefill from the signal a waiting run waits for, if it waits for one."""
        try:
            wait = WaitingFor.parse(waiting_for or "")
        except ValueError:
            return {}
        return {"signal": wait.target, "occurrence": wait.occurrence} if wait.kind == WaitingFor.SIGNAL else {}


# -- runs ------------------------------------------------------------------

_CANCEL_DETAIL = {
    CancelOutcome.CANCELLED: "the run and its unfinished descendants are cancelled",
    CancelOutcome.REQUESTED: "the run is running: it stops at its next step or heartbeat",
    CancelOutcome.REFUSED: "already finished, or past a pivot step: nothing changed",
}
_NOT_FOUND = Outcome(label="not found", detail="the run no longer exists", ok=False)


def cancel_run(record: Run, data: dict[str, Any]) -> Outcome:
    """``cancel()`` one run: cancelled, requested or refused."""
    try:
        outcome = api.cancel(record.run_id)
    except RunNotFound:
        return _NOT_FOUND
    return Outcome(label=outcome.value, detail=_CANCEL_DETAIL[outcome], ok=outcome != CancelOutcome.REFUSED)


def resume_run(record: Run, data: dict[str, Any]) -> Outcome:
    """``resume()`` a failed or cancelled run, journal intact."""
    try:
        run = api.resume(record.run_id)
    except RunNotFound:
        return _NOT_FOUND
    except InvalidInput as exc:
        return Outcome(label="refused", detail=str(exc), ok=False)
    return Outcome(label="resumed", detail=f"the run is {run.status} again, its journal kept")


def retry_run(record: Run, data: dict[str, Any]) -> Outcome:
    """Enqueue a new run of the same function, version, input, tenant, queue and priority."""
    run = api.get_run(record.run_id)
    if run is None:
        return _NOT_FOUND
    if run.status not in TERMINAL_STATUSES:
        return Outcome(label="refused", detail=f"the run is still {run.status}", ok=False)
    try:
        new = api.retry_as_new_run(run.run_id)
    except DurableError as exc:
        return Outcome(label="refused", detail=str(exc), ok=False)
    return Outcome(label="retried", detail="a new run with the same input", new_run_id=new.run_id)


def signal_run(record: Run, data: dict[str, Any]) -> Outcome:
    """``emit_signal()`` to one run; the first committed value of (run, signal, occurrence) wins."""
    try:
        stored = api.emit_signal(record.run_id, data["signal"], data["value"], occurrence=data["occurrence"])
    except RunNotFound:
        return _NOT_FOUND
    except InvalidInput as exc:
        return Outcome(label="refused", detail=str(exc), ok=False)
    text = json.dumps(stored, ensure_ascii=False)
    if stored != data["value"]:
        return Outcome(label="already sent", detail=f"an earlier value was kept: {text}", ok=False)
    return Outcome(label="signal stored", detail=f"{data['signal']}#{data['occurrence']} = {text}")


# -- schedules ---------------------------------------------------------------


def schedule_address(record: Schedule) -> tuple[str, str | None]:
    """A stored schedule as the API addresses it: the id as it was passed, and its tenant."""
    return unscope(record.schedule_id), (str(record.tenant_id) if record.tenant_id else None)


def _set_enabled(enabled: bool) -> Callable[[Schedule, dict[str, Any]], Outcome]:
    def perform(record: Schedule, data: dict[str, Any]) -> Outcome:
        schedule_id, tenant_id = schedule_address(record)
        try:
            schedule = api.set_schedule_enabled(schedule_id, enabled, tenant_id=tenant_id)
        except InvalidInput as exc:
            return Outcome(label="not found", detail=str(exc), ok=False)
        return Outcome(
            label="enabled" if enabled else "disabled",
            detail=f"next fire at {schedule.next_fire_at:%Y-%m-%d %H:%M:%S} UTC",
        )

    return perform


def fire_schedule(record: Schedule, data: dict[str, Any]) -> Outcome:
    """``fire_schedule_now()``: one run now, the regular ticks left as they are."""
    schedule_id, tenant_id = schedule_address(record)
    try:
        run = api.fire_schedule_now(schedule_id, tenant_id=tenant_id)
    except DurableError as exc:
        return Outcome(label="refused", detail=str(exc), ok=False)
    return Outcome(label="fired", detail=f"a run of {run.name} was enqueued", new_run_id=run.run_id)


# -- the operations ----------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Operation(Generic[_R]):
    """One thing an operator can do: who may, what the confirmation says, and the API call."""

    key: str
    verb: str
    action_description: str
    # The ModelAdmin's has_<permission>_permission decides who may.
    permission: str
    explanation: str
    perform: Callable[[_R, dict[str, Any]], Outcome]
    # Runs whose page offers this as a button (the bulk action reports the others' refusals).
    offered_for: frozenset[str] = frozenset()
    form_class: type[SignalForm] | None = None


def _by_key(*operations: Operation[_R]) -> dict[str, Operation[_R]]:
    return {operation.key: operation for operation in operations}


RUN_OPERATIONS = _by_key(
    Operation(
        key="cancel",
        verb="Cancel",
        action_description="Cancel the selected runs",
        permission="cancel",
        perform=cancel_run,
        offered_for=LIVE_STATUSES,
        explanation="Pending and waiting runs are cancelled now, with their unfinished descendants; running "
        "runs are asked to stop at their next step; finished runs and runs past a pivot step refuse.",
    ),
    Operation(
        key="resume",
        verb="Resume",
        action_description="Resume the selected runs",
        permission="retry",
        perform=resume_run,
        offered_for=RESUMABLE,
        explanation="Failed and cancelled runs go back to pending with their journal intact, so completed "
        "steps are not run again, and a fresh failure budget.",
    ),
    Operation(
        key="retry",
        verb="Retry as a new run",
        action_description="Retry the selected runs as new runs",
        permission="retry",
        perform=retry_run,
        offered_for=TERMINAL_STATUSES,
        explanation="Each finished run is submitted again as a new run of the same function version, with "
        "the same input, tenant, queue and priority and an empty journal.",
    ),
    Operation(
        key="signal",
        verb="Send a signal",
        action_description="Send a signal to the selected runs",
        permission="signal",
        perform=signal_run,
        offered_for=LIVE_STATUSES,
        form_class=SignalForm,
        explanation="The signal is stored for each run (the first value sent wins) and wakes a run waiting "
        "on exactly that signal and occurrence.",
    ),
)

SCHEDULE_OPERATIONS = _by_key(
    Operation(
        key="enable",
        verb="Enable",
        action_description="Enable the selected schedules",
        permission="change",
        perform=_set_enabled(True),
        explanation="Enabled schedules fire at their next tick; ticks that passed while they were disabled "
        "are not fired.",
    ),
    Operation(
        key="disable",
        verb="Disable",
        action_description="Disable the selected schedules",
        permission="change",
        perform=_set_enabled(False),
        explanation="Disabled schedules keep their definition and fire nothing until enabled again.",
    ),
    Operation(
        key="fire",
        verb="Fire now",
        action_description="Fire the selected schedules now",
        permission="fire",
        perform=fire_schedule,
        explanation="Each schedule enqueues one run now, enabled or not; its regular ticks stay as they are.",
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
) -> tuple[list[Outcome], None] | tuple[None, TemplateResponse]:
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

    Returns:
        ``(outcomes, None)`` once performed, else ``(None, the confirmation response)``.
    """
    confirmed = request.method == "POST" and request.POST.get("confirm") == "yes"
    if confirmed and (form is None or form.is_valid()):
        data = form.cleaned_data if form is not None else {}
        outcomes: list[Outcome] = []
        for target in targets:
            outcome = operation.perform(target, data)
            outcomes.append(outcome)
            model_admin.log_change(request, target, f"{operation.verb}: {outcome.label}. {outcome.detail}".strip())
        return outcomes, None
    opts = model_admin.model._meta
    context = {
        **model_admin.admin_site.each_context(request),
        "title": f"{operation.verb}: are you sure?",
        "opts": opts,
        "operation": operation,
        "rows": [(target, describe(target)) for target in targets],
        "form": form,
        "hidden": hidden,
        "bulk": bulk,
        "confirm_url": confirm_url or request.get_full_path(),
        "back_url": back_url,
        "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
    }
    return None, TemplateResponse(request, "admin/durable_django/confirm_operation.html", context)


def outcomes_response(
    model_admin: DurableModelAdmin[_R],
    request: HttpRequest,
    *,
    operation: Operation[_R],
    targets: list[_R],
    outcomes: list[Outcome],
) -> TemplateResponse:
    """The page that lists what a bulk action did to each target."""
    summary: dict[str, int] = {}
    for outcome in outcomes:
        summary[outcome.label] = summary.get(outcome.label, 0) + 1
    model_admin.message_user(
        request,
        f"{operation.verb}: " + ", ".join(f"{count} {label}" for label, count in summary.items()),
        messages.SUCCESS if all(outcome.ok for outcome in outcomes) else messages.WARNING,
    )
    context = {
        **model_admin.admin_site.each_context(request),
        "title": f"{operation.verb}: outcome",
        "opts": model_admin.model._meta,
        "operation": operation,
        "rows": list(zip(targets, outcomes, strict=True)),
    }
    return TemplateResponse(request, "admin/durable_django/operation_outcomes.html", context)


def message_outcome(
    model_admin: DurableModelAdmin[_R], request: HttpRequest, operation: Operation[_R], outcome: Outcome
) -> None:
    """Report one target's outcome as a message on the page the operator returns to."""
    text = f"{operation.verb}: {outcome.label}"
    if outcome.detail:
        text += f" ({outcome.detail})"
    if outcome.new_run_id:
        text += f"; new run {outcome.new_run_id}"
    model_admin.message_user(request, text, messages.SUCCESS if outcome.ok else messages.WARNING)
