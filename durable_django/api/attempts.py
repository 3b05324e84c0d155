"""A run's attempts, as an operator reads them: every claim kept, with its outcome and error."""

from __future__ import annotations

from uuid import UUID

from ..exceptions import RunNotFound
from ..store import attempts as attempt_store
from ..store import runs as run_store
from ..tenancy import normalize_tenant
from ..types import AttemptRecord
from .runs import run_id_of


def list_attempts(run_id: str | UUID, *, tenant_id: str | UUID | None = None) -> list[AttemptRecord]:
    """Every attempt of a run, oldest first: the ended ones, then the one running now (``ended_at`` None).

    Raises:
        RunNotFound: no such run is visible to ``tenant_id``.
    """
    run_id = run_id_of(run_id)
    if run_store.get_run(run_id, normalize_tenant(tenant_id)) is None:
        raise RunNotFound(f"no run {run_id}", run_id=run_id)
    return attempt_store.list_attempts(run_id)
