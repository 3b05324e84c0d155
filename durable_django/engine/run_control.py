"""Steering a run from outside its worker: cancel it, resume it, deliver it a signal.

The client API checks what the caller passed; the rules of each write (which
runs it may change, the lock order, what it wakes) are the store's statements
and this module's, so every door that steers a run (the API, the admin through
it, a bulk batch, a schedule's overlap policy) follows the same ones.
"""

from __future__ import annotations

from typing import Any

from ..exceptions import InvalidInput, RunNotFound, UnknownFunction
from ..states import CancelOutcome
from ..storable import integer
from ..store import cancellation, resumes
from ..store import runs as run_store
from ..store import waits as wait_store
from ..types import Run
from . import health, signalling


def cancel(run_id: str, tenant_id: str | None) -> CancelOutcome:
    """Cancel a run and its descendants: CANCELLED, REQUESTED (it is running) or REFUSED.

    Raises:
        RunNotFound: no such run is visible to ``tenant_id``.
    """
    outcome = cancellation.cancel(run_id, tenant_id)
    if outcome is None:
        raise RunNotFound(f"no run {run_id}", run_id=run_id)
    if outcome is CancelOutcome.CANCELLED:
        signalling.run_finished_by_id(run_id)
    return outcome


def emit_signal(run_id: str, signal: str, occurrence: int, value_json: str, tenant_id: str | None) -> Any:
    """Deliver a signal; the first committed value wins and is returned.

    Raises:
        RunNotFound: no such run is visible to ``tenant_id``.
    """
    return wait_store.emit_signal(run_id, signal, occurrence, value_json, tenant_id)


def resume(run_id: str, tenant_id: str | None, *, version: int | None = None) -> Run:
    """Put a failed, cancelled or parked run back to pending, journal intact, with a fresh failure budget.

    Raises:
        RunNotFound: no such run is visible to ``tenant_id``.
        InvalidInput: the run is live or succeeded, or it is a child whose parent has finished.
        UnknownFunction: nobody registers ``version``.
    """
    if version is not None:
        current = run_store.get_run(run_id, tenant_id)
        if current is None:
            raise RunNotFound(f"no run {run_id}", run_id=run_id)
        version = check_version(current.name, version)
    run = resumes.resume(run_id, tenant_id, version=version)
    if run is not None:
        return run
    current = run_store.get_run(run_id, tenant_id)
    if current is None:
        raise RunNotFound(f"no run {run_id}", run_id=run_id)
    raise InvalidInput(
        f"run {run_id} is {current.status}; only failed, cancelled or parked runs can be resumed", run_id=run_id
    )


def check_version(name: str, version: object) -> int:
    """A version of ``name`` that this process or a live worker registers (for a resume or a fork).

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
