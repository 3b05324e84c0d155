"""One batch of a bulk operation: cancel, resume or retry a page of runs in one transaction, in a few statements.

Each run gets what ``cancel()``, ``resume()`` or ``retry_as_new_run()`` would give it, called run by run in
the page's order (newest first), and the same outcome is counted, the same signals sent. The batch commits
whole or not at all, so a crash inside it changes nothing; a batch redone after its commit (its step not yet
journalled) does nothing twice: a cancel or resume of a run it already ended or resumed is refused (or the
run no longer matches), a retry joins the run its key made.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, Protocol

from .. import faults
from ..exceptions import DurableError
from ..registry import TASK_PATH_VERSION
from ..states import TERMINAL_STATUSES, RunStatus
from ..storable import json_text
from ..store import bulk as bulk_store
from ..store import runs as run_store
from ..store.bulk import Listed
from ..store.db import in_transaction
from ..submission import RunOptions
from ..types import Run
from . import reruns, signalling, submit_many

NOT_FOUND = "not found"
REFUSED = "refused"
SKIPPED = "skipped"


class ListedRun(Protocol):
    """What a batch decides on of a run as its page listed it (a ``Run`` has it, and so has a ``Listed``)."""

    @property
    def run_id(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def status(self) -> RunStatus: ...
    @property
    def parked_at(self) -> datetime | None: ...


def page(checked: dict[str, Any], cursor: str | None, limit: int) -> tuple[list[Listed], str | None]:
    """A page of the runs ``checked`` (a bulk operation's filters, checked) match, newest first, as
    ``list_runs()`` lists them.

    Raises:
        InvalidInput: a bad cursor.
    """
    contains = checked.get("input_contains")
    return bulk_store.list_matching(
        status=checked.get("status"),
        name=checked.get("name"),
        tenant_id=checked.get("tenant_id"),
        input_contains=None if contains is None else json_text(contains, what="input_contains"),
        parked=checked.get("parked", False),
        limit=limit,
        after=run_store.decode_cursor(cursor) if cursor else None,
    )


def retry_key(bulk_run_id: str, run_id: str) -> str:
    """The idempotency key of the new run a bulk retry makes of ``run_id``: one per bulk run and original."""
    return f"durable_django.bulk:{bulk_run_id}:{run_id}"


def act(bulk_run_id: str, operation: str, runs: Sequence[ListedRun]) -> dict[str, int]:
    """Apply ``operation`` to ``runs`` (as a page listed them, newest first) in one transaction.

    Returns:
        How many runs had each outcome.
    """
    action = _ACTIONS[operation]

    def work() -> dict[str, int]:
        outcomes = action(bulk_run_id, runs)
        faults.reach("bulk.acted")
        counts: dict[str, int] = {}
        for run in runs:
            outcome = outcomes[run.run_id]
            counts[outcome] = counts.get(outcome, 0) + 1
        return counts

    counts = in_transaction(work)
    faults.reach("bulk.committed")
    return counts


def _cancel(bulk_run_id: str, runs: Sequence[ListedRun]) -> dict[str, str]:
    run_ids = [run.run_id for run in runs]
    decided = bulk_store.cancel_batch(run_ids) if run_ids else {}
    outcomes = {run_id: decided.get(run_id, NOT_FOUND) for run_id in run_ids}
    signalling.runs_finished_by_ids([run_id for run_id in run_ids if outcomes[run_id] == "cancelled"])
    return outcomes


def _resume(bulk_run_id: str, runs: Sequence[ListedRun]) -> dict[str, str]:
    # Decided on the run as listed, as the one-by-one loop decided it: failed, cancelled and parked runs resume.
    outcomes = {
        run.run_id: SKIPPED
        for run in runs
        if run.status not in (RunStatus.FAILED, RunStatus.CANCELLED) and run.parked_at is None
    }
    chosen = [run.run_id for run in runs if run.run_id not in outcomes]
    if chosen:
        found, resumed = bulk_store.resume_batch(chosen)
        for run_id in chosen:
            outcomes[run_id] = "resumed" if run_id in resumed else REFUSED if run_id in found else NOT_FOUND
    return outcomes


def _retry(bulk_run_id: str, runs: Sequence[ListedRun]) -> dict[str, str]:
    """One new run per finished run, submitted together per function (and the options they share)."""
    outcomes = {run.run_id: SKIPPED for run in runs if run.status not in TERMINAL_STATUSES}
    current = run_store.get_runs([run.run_id for run in runs if run.run_id not in outcomes])
    groups: dict[tuple[Any, ...], list[Run]] = defaultdict(list)
    for listed in runs:
        if listed.run_id in outcomes:
            continue
        run = current.get(listed.run_id)
        if run is None:
            outcomes[listed.run_id] = NOT_FOUND
        elif run.is_live:
            outcomes[run.run_id] = REFUSED
        elif run.version == TASK_PATH_VERSION:
            outcomes[run.run_id] = _retry_one(bulk_run_id, run)
        else:
            groups[(run.name, run.version, run.tenant_id, run.queue, run.priority, run.retry_policy)].append(run)
    for (name, version, tenant_id, queue, priority, policy), group in groups.items():
        try:
            options = RunOptions.of(tenant_id=tenant_id, version=version, queue=queue, priority=priority, retry=policy)
            batch = submit_many.batch_request(
                name,
                [run.input for run in group],
                options,
                idempotency_keys=[retry_key(bulk_run_id, run.run_id) for run in group],
            )
        except DurableError:
            # Whatever one run's submit refuses, it refuses alone.
            outcomes.update({run.run_id: _retry_one(bulk_run_id, run) for run in group})
            continue
        submit_many.submit_batch(batch)
        outcomes.update({run.run_id: "retried" for run in group})
    return outcomes


def _retry_one(bulk_run_id: str, run: Run) -> str:
    try:
        reruns.retry_as_new(run, idempotency_key=retry_key(bulk_run_id, run.run_id))
    except DurableError:
        return REFUSED
    return "retried"


_ACTIONS: dict[str, Callable[[str, Sequence[ListedRun]], dict[str, str]]] = {
    "cancel": _cancel,
    "resume": _resume,
    "retry": _retry,
}
