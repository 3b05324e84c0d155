"""The operations on one run: cancel, resume, retry as a new run, send a signal.

Each is an ``Operation`` (``operations``): a permission, a confirmation and one
client API call per run, whose outcome (a refusal too) the operator reads.
The operator-control ones (pauses, fork, resume on another version) are in
``control``.
"""

from __future__ import annotations

import json
from typing import Any

from django.http import HttpRequest
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from .. import api
from ..exceptions import DurableError, InvalidInput, RunNotFound
from ..journal_ids import WaitingFor
from ..models import Run
from ..states import LIVE_STATUSES, TERMINAL_STATUSES, CancelOutcome, RunStatus
from .display import outcome_word
from .fields import JSONValueField, NameField, StoredIntegerField
from .operations import ActionResult, Operation, OperationForm, by_key

# The statuses a run can be resumed from (on its own version or another).
RESUMABLE = frozenset({RunStatus.FAILED, RunStatus.CANCELLED})


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


RUN_OPERATIONS = by_key(
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
