"""Forking a run from a step, and the version checks of fork and resume.

A fork is a new run of the same function and input (on the run's version, or
another) whose journal is a copy of the original's entries journalled before a
step: it replays those and executes from there on. The original is unchanged.
A copied spawn keeps its child: the fork may wait for it and gets its result.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from ..engine import health, submit
from ..exceptions import InvalidInput, RunNotFound, UnknownFunction
from ..journal_ids import StepId
from ..registry import TASK_PATH_VERSION
from ..storable import integer, text
from ..store import forks as fork_store
from ..store import runs as run_store
from ..submission import RunOptions
from ..tenancy import normalize_tenant
from ..types import Run


def check_version(name: str, version: object) -> int:
    """A version of ``name`` that this process or a live worker registers.

    Raises:
        InvalidInput: not a positive integer.
        UnknownFunction: nobody registers that version.
    """
    number = integer(version, what="version", minimum=1)
    registered = health.registered_versions(name)
    if number not in registered:
        raise UnknownFunction(
            f"no live worker (nor this process) registers {name} version {number}; registered: "
            + (", ".join(map(str, registered)) or "none")
        )
    return number


def copied_steps(run_id: str, from_step: str | None) -> list[str]:
    """The step ids of the entries journalled before the first entry of step ``from_step`` (all: None).

    Raises:
        InvalidInput: the journal holds no entry of that step.
    """
    entries = fork_store.journal_order(run_id)
    if from_step is None:
        return [step_id for step_id, _ in entries]
    cutoff = next((at for step_id, at in entries if _step_name(step_id) == from_step), None)
    if cutoff is None:
        raise InvalidInput(f"the journal of run {run_id} holds no step {from_step!r}", run_id=run_id)
    return [step_id for step_id, at in entries if at < cutoff]


def _step_name(step_id: str) -> str | None:
    try:
        return StepId.parse(step_id).name
    except ValueError:
        return None


def fork(
    run_id: str | UUID, *, from_step: str | None = None, version: int | None = None, tenant_id: str | UUID | None = None
) -> Run:
    """A new run of the run's function and input whose journal is the original's up to step ``from_step``.

    Args:
        from_step: the name of a step in the journal: the fork replays what was journalled before its
            first entry and executes from there on. None copies the whole journal.
        version: the version the fork runs on (its copied entries re-keyed to it); the run's own by default.

    Raises:
        RunNotFound: no such run is visible to ``tenant_id``.
        InvalidInput: a step the journal does not hold, a bad version, or a Django Tasks run.
        UnknownFunction: nobody registers ``version``.
    """
    if run_id is None:
        raise InvalidInput("invalid run id None")
    original = run_store.get_run(text(str(run_id), what="a run id"), normalize_tenant(tenant_id))
    if original is None:
        raise RunNotFound(f"no run {run_id}", run_id=str(run_id))
    if original.version == TASK_PATH_VERSION:
        raise InvalidInput(f"run {original.run_id} is a Django Tasks run: it has no journal to fork")
    if from_step is not None:
        text(from_step, what="from_step")
    target_version = original.version if version is None else check_version(original.name, version)
    steps = copied_steps(original.run_id, from_step)
    options = RunOptions.of(
        version=target_version,
        tenant_id=original.tenant_id,
        queue=original.queue,
        priority=original.priority,
        retry=original.retry_policy,
    )
    request = submit.request(original.name, original.input, options)
    origin: dict[str, Any] = {"run_id": original.run_id, "step": from_step}
    return fork_store.fork(request, original=original.run_id, step_ids=steps, forked_from=origin)
