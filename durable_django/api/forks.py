"""Forking a run from a step.

A fork is a new run of the same function and input (on the run's version, or
another) whose journal is a copy of the original's entries journalled before a
step: it replays those and executes from there on. The original is unchanged.
A copied spawn keeps its child: the fork may wait for it and gets its result.
"""

from __future__ import annotations

from uuid import UUID

from ..engine import forks
from ..exceptions import InvalidInput, RunNotFound
from ..storable import text
from ..store import runs as run_store
from ..tenancy import normalize_tenant
from ..types import Run


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
    return forks.fork(original, from_step=from_step, version=version)
