"""The operator-control operations on runs: pause their function or queue, fork, resume on another version.

Each is an ``Operation`` like those of ``run_operations`` (a permission, a
confirmation, one API call); fork and resume-on-version are offered on a run's
page only (fork from each journal row), the pauses as actions on the list too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django import forms
from django.http import HttpRequest
from django.utils.translation import gettext, gettext_lazy

from .. import api
from ..api import operations as api_operations
from ..exceptions import DurableError, InvalidInput, RunNotFound
from ..models import Run
from .display import outcome_word
from .operations import ActionResult, Operation, OperationForm
from .run_operations import RESUMABLE, RUN_OPERATIONS, not_found


def _pause(what: str) -> Callable[[Run, dict[str, Any]], ActionResult]:
    def perform(record: Run, data: dict[str, Any]) -> ActionResult:
        target = {"function": record.name} if what == "function" else {"queue": record.queue}
        pause = api.pause(**target)
        label = gettext("function paused") if what == "function" else gettext("queue paused")
        return ActionResult(
            label=label, detail=gettext("%(key)s: its due runs wait until it is unpaused") % {"key": pause.key}
        )

    return perform


class ForkForm(OperationForm):
    """The step the fork executes from; empty forks the whole journal."""

    from_step = forms.CharField(
        label=gettext_lazy("From step"),
        required=False,
        max_length=1000,
        help_text=gettext_lazy(
            "The fork replays what was journalled before this step's first entry and executes from it on; "
            "empty: it replays the whole journal."
        ),
    )

    @classmethod
    def initial_for(cls, run: Run, request: HttpRequest) -> dict[str, object]:
        return {"from_step": request.GET.get("from_step", "")}

    def clean_from_step(self) -> str | None:
        step: str = self.cleaned_data["from_step"]
        if "\x00" in step:
            raise forms.ValidationError(gettext("a step name holds no NUL character"))
        return step or None


def other_versions(run: Run) -> list[int]:
    """The versions of the run's function, other than its own, that a live worker registers."""
    registered, _ = api_operations.versions_overview()
    return [version for version in registered.get(run.name, []) if version != run.version]


class ResumeOnVersionForm(OperationForm):
    """The version to resume on."""

    version = forms.IntegerField(
        label=gettext_lazy("Version"),
        min_value=1,
        help_text=gettext_lazy("A version of the function that a live worker registers."),
    )

    def clean_version(self) -> int:
        version: int = self.cleaned_data["version"]
        if self.run is not None and version not in (offered := other_versions(self.run)):
            raise forms.ValidationError(
                gettext(
                    "no live worker registers version %(version)s of %(function)s (other than the run's own); "
                    "registered: %(registered)s"
                )
                % {
                    "version": version,
                    "function": self.run.name,
                    "registered": ", ".join(map(str, offered)) or gettext("none"),
                }
            )
        return version

    @classmethod
    def initial_for(cls, run: Run, request: HttpRequest) -> dict[str, object]:
        versions = other_versions(run)
        return {"version": versions[-1]} if versions else {}


def fork_run(record: Run, data: dict[str, Any]) -> ActionResult:
    """``fork()`` the run from a step (or whole); the operator lands on the fork's page."""
    try:
        fork = api.fork(record.run_id, from_step=data.get("from_step"))
    except RunNotFound:
        return not_found()
    except DurableError as exc:
        return ActionResult(label=gettext("refused"), detail=str(exc), ok=False)
    step = data.get("from_step")
    detail = (
        gettext("a new run replaying the journal before step %(step)s") % {"step": repr(step)}
        if step
        else gettext("a new run replaying its journal")
    )
    return ActionResult(label=gettext("forked"), detail=detail, new_run_id=fork.run_id)


def resume_on_version(record: Run, data: dict[str, Any]) -> ActionResult:
    """``resume(version=N)``: the failed or cancelled run continues on version N, its journal kept."""
    try:
        run = api.resume(record.run_id, version=data["version"])
    except RunNotFound:
        return not_found()
    except (InvalidInput, DurableError) as exc:
        return ActionResult(label=gettext("refused"), detail=str(exc), ok=False)
    return ActionResult(
        label=gettext("resumed"),
        detail=gettext("the run is %(status)s again, on version %(version)s")
        % {"status": outcome_word(run.status), "version": run.version},
    )


CONTROL_OPERATIONS: dict[str, Operation[Run]] = {
    operation.key: operation
    for operation in (
        Operation(
            key="pause_function",
            verb=gettext_lazy("Pause their functions"),
            action_description=gettext_lazy("Pause the functions of the selected runs"),
            permission="pause",
            perform=_pause("function"),
            explanation=gettext_lazy(
                "No worker starts a new attempt of these functions until they are unpaused (on the "
                "pauses page); their due runs stay pending, running attempts finish."
            ),
        ),
        Operation(
            key="pause_queue",
            verb=gettext_lazy("Pause their queues"),
            action_description=gettext_lazy("Pause the queues of the selected runs"),
            permission="pause",
            perform=_pause("queue"),
            explanation=gettext_lazy(
                "No worker starts a new attempt of any run in these queues until they are unpaused (on "
                "the pauses page); their due runs stay pending, running attempts finish."
            ),
        ),
        Operation(
            key="fork",
            verb=gettext_lazy("Fork"),
            action_description=gettext_lazy("Fork the selected runs"),
            permission="fork",
            perform=fork_run,
            form_class=ForkForm,
            bulk=False,
            explanation=gettext_lazy(
                "A new run of the same function and input starts, replaying a copy of this run's "
                "journal up to the step named; this run is left as it is."
            ),
        ),
        Operation(
            key="resume_on_version",
            verb=gettext_lazy("Resume on another version"),
            action_description=gettext_lazy("Resume the selected runs on another version"),
            permission="resume_on_version",
            perform=resume_on_version,
            offered_for=RESUMABLE,
            offered_when=lambda run: bool(other_versions(run)),
            form_class=ResumeOnVersionForm,
            bulk=False,
            explanation=gettext_lazy(
                "The failed or cancelled run goes back to pending on the version chosen, its journal kept "
                "(re-keyed to that version, whose code replays it), with a fresh failure budget."
            ),
        ),
    )
}

# Every operation on runs, by key: the buttons of a run's page, its URLs, and (those marked bulk) the list's actions.
ALL_RUN_OPERATIONS: dict[str, Operation[Run]] = {**RUN_OPERATIONS, **CONTROL_OPERATIONS}
