"""Forks: a new run of a run's function and input on a copy of its journal up to a step.

A fork is a new run of the same function and input (on the run's version, or
another) whose journal is a copy of the original's entries journalled before a
step: it replays those and executes from there on. The original is unchanged.
A copied spawn keeps its child: the fork may wait for it and gets its result.
"""

from __future__ import annotations

from typing import Any

from ..exceptions import InvalidInput
from ..journal_ids import StepId
from ..registry import TASK_PATH_VERSION
from ..storable import text
from ..store import forks as fork_store
from ..submission import RunOptions
from ..types import Run
from . import submit
from .run_control import check_version


def fork(original: Run, *, from_step: str | None, version: int | None) -> Run:
    """Fork ``original`` from step ``from_step`` (None: its whole journal), on ``version`` (None: its own).

    Raises:
        InvalidInput: a step the journal does not hold, a bad version, or a Django Tasks run.
        UnknownFunction: nobody registers ``version``.
    """
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

