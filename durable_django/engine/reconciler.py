"""The reconciler: finds runs in states that must not exist and repairs each, so that no run strands.

The engine's transitions are built so these states never arise; the
reconciler is the net under them, and every repair it makes is logged at
WARNING with the run id and counted, because each one points at a bug. It
looks for:

- a run waiting for a child that has finished, for children whose wait is over
  (the last it awaits has landed, or for wait_for_any the first), or for a
  signal that is stored, or for nothing that can wake it (no deadline, nothing
  it recognises): it is woken, and its replay settles the wait;
- a live child (not past a pivot) of a parent that has finished: it is
  cancelled by the rule of ``cancel()``;
- a run left running long after its lease expired that no reclaim may run
  again (``MAX_RECOVERIES`` used up): it is failed;
- runs a concurrency limit holds back while the limit has room (their slot's
  release was lost with a crash), or that a rate limit holds with no time to
  look again: they are released.

It also deletes the rate-limited starts that have left their windows.

One worker reconciles at a time (a transaction-level advisory lock). Each
pass reads bounded chunks and remembers where it stopped, so a pass costs the
same on any size of table and every run is seen within a few passes.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from ..conf import durable_settings
from ..exceptions import RecoveriesExhausted
from ..flow_control import QUEUE_CONCURRENCY_PREFIX, QueueLimits, configured_queue_limits
from ..journal_ids import WaitingFor
from ..states import TERMINAL_STATUSES
from ..store import cancellation, landing, leases, pauses, reconcile
from ..store.db import in_transaction
from ..types import PAUSE_PREFIX
from .outcomes import exception_path, format_error

logger = logging.getLogger("durable_django.reconciler")

# Rows each scan reads per pass.
CHUNK = 500


@dataclass(frozen=True, slots=True)
class Repair:
    """One run the reconciler found in a state that must not exist, and what it did."""

    run_id: str
    problem: str
    action: str


def stranded_wait(run: reconcile.WaitingRun) -> str | None:
    """What is wrong with a waiting run that nothing can wake, or None if something can."""
    try:
        waiting_for = WaitingFor.parse(run.waiting_for or "")
    except ValueError:
        return f"waits for {run.waiting_for!r}, which nothing can wake"
    if waiting_for.kind == WaitingFor.SLEEP and not run.has_deadline:
        return "sleeps with no deadline"
    if waiting_for.kind == WaitingFor.CHILD:
        if run.child_finished:
            return f"waits for child {waiting_for.target}, which has finished"
        if run.child_finished is None and not run.has_deadline:
            return f"waits for run {waiting_for.target}, which is not its child, with no deadline"
    if waiting_for.kind == WaitingFor.CHILDREN:
        if run.children_over:
            return f"waits for {waiting_for.target} of the children it awaits, and that wait is over"
        if not run.children_live and not run.has_deadline:
            return "waits for children none of which is live, with no deadline"
    if waiting_for.kind == WaitingFor.SIGNAL and run.signal_stored:
        return f"waits for signal {waiting_for.target!r} #{waiting_for.occurrence}, which is stored"
    return None


class Reconciler:
    """Repairs stranded runs, a bounded chunk of each kind per pass."""

    def __init__(self, *, chunk: int = CHUNK) -> None:
        self.chunk = chunk
        self._waiting_after = ""
        self._children_after = ("", "")
        self._held_after = ""

    def run_pass(self) -> list[Repair]:
        """One pass, unless another worker is reconciling right now; returns the repairs made."""
        repairs = in_transaction(self._pass)
        for repair in repairs:
            logger.warning(
                "reconciler: run %s %s; %s",
                repair.run_id,
                repair.problem,
                repair.action,
                extra={"run_id": repair.run_id},
            )
        return repairs

    def stranded(self) -> list[Repair]:
        """Every run in a state that must not exist, read through every chunk, repairing nothing."""
        found: list[Repair] = []
        after = ""
        while True:
            chunk = reconcile.waiting_chunk(after, self.chunk)
            found += [Repair(run.run_id, problem, "") for run in chunk if (problem := stranded_wait(run))]
            if len(chunk) < self.chunk:
                break
            after = chunk[-1].run_id
        position: tuple[str, str] | None = ("", "")
        while position is not None:
            orphans, position = reconcile.orphans_chunk(position, self.chunk)
            found += [
                Repair(run_id, f"is live while its parent {parent} has finished", "") for run_id, parent in orphans
            ]
        found += [
            Repair(run_id, "was left running long past its lease with no recovery left", "")
            for run_id, *_ in reconcile.expired(
                3 * durable_settings.LEASE_SECONDS, durable_settings.MAX_RECOVERIES, self.chunk
            )
        ]
        return found

    def any_stranded(self, *, worker_live: bool, limit: int = 20) -> list[Repair]:
        """Some runs in a state that must not exist (none if there is none), in a few bounded statements.

        Unlike :meth:`stranded` it does not walk the table chunk by chunk: each
        kind is one statement over the live runs of that kind, through their
        partial indexes, stopping at the first ``limit`` it finds. A run left
        running long past its lease counts while a worker is live (one would
        have reclaimed it), whatever its recoveries.
        """
        found = [
            Repair(run.run_id, problem, "")
            for run in reconcile.stranded_waits(limit)
            if (problem := stranded_wait(run)) is not None
        ]
        found += [
            Repair(run_id, f"is live while its parent {parent} has finished", "")
            for run_id, parent in reconcile.stranded_children(limit)
        ]
        if worker_live:
            found += [
                Repair(run_id, "is still running more than three leases after its lease expired", "")
                for run_id in reconcile.long_expired(3 * durable_settings.LEASE_SECONDS, limit)
            ]
        return found

    def _pass(self) -> list[Repair]:
        if not reconcile.try_lock():
            return []
        reconcile.delete_expired_starts(self.chunk)
        leases.delete_expired(self.chunk)
        return [*self._waiting(), *self._orphans(), *self._expired(), *self._held()]

    def _waiting(self) -> list[Repair]:
        chunk = reconcile.waiting_chunk(self._waiting_after, self.chunk)
        self._waiting_after = chunk[-1].run_id if len(chunk) == self.chunk else ""
        repairs = []
        for run in chunk:
            if stranded_wait(run) is None:
                continue
            reconcile.lock_run(run.run_id)
            # Read again under the lock: a landing or a signal may have just woken it.
            current = reconcile.waiting_run(run.run_id)
            if current is None:
                continue
            problem = stranded_wait(current)
            if problem is not None and reconcile.wake(current.run_id, current.waiting_for):
                repairs.append(Repair(run.run_id, problem, "woken to replay its wait"))
        return repairs

    def _orphans(self) -> list[Repair]:
        orphans, position = reconcile.orphans_chunk(self._children_after, self.chunk)
        self._children_after = position or ("", "")
        repairs = []
        for run_id, parent_run_id in orphans:
            reconcile.lock_run(parent_run_id)
            # Read again under the parent's lock: a resume may have made it live again.
            if reconcile.status_of(parent_run_id) not in TERMINAL_STATUSES:
                continue
            outcome = cancellation.cancel(run_id, None)
            repairs.append(
                Repair(
                    run_id,
                    f"is live while its parent {parent_run_id} has finished",
                    f"cancelled by the rule of cancel(): {outcome.value if outcome else 'gone'}",
                )
            )
        return repairs

    def _held(self) -> list[Repair]:
        keys = reconcile.held_keys(self._held_after, self.chunk)
        self._held_after = keys[-1][0] if len(keys) == self.chunk else ""
        queues = configured_queue_limits()
        repairs = []
        for key, head_limit, rechecked in keys:
            if key.startswith(PAUSE_PREFIX):
                if pauses.exists(key):
                    continue  # it holds them until it ends
                released = reconcile.release_if_room(key, limit=None)
            elif key.startswith("rate:"):
                if rechecked:
                    continue  # it is looked at again when its window reopens
                released = reconcile.release_if_room(key, limit=None)
            elif key.startswith(QUEUE_CONCURRENCY_PREFIX):
                queue = key[len(QUEUE_CONCURRENCY_PREFIX) :]
                released = reconcile.release_if_room(key, limit=queues.get(queue, QueueLimits()).concurrency)
            else:
                released = reconcile.release_if_room(key, limit=head_limit)
            if released:
                repairs.append(Repair(key, f"held {released} run(s) back while it had room", "released them"))
        return repairs

    def _expired(self) -> list[Repair]:
        lease, max_recoveries = durable_settings.LEASE_SECONDS, durable_settings.MAX_RECOVERIES
        repairs = []
        for run_id, token, parent_run_id, recoveries in reconcile.expired(3 * lease, max_recoveries, self.chunk):
            error = RecoveriesExhausted(
                f"run {run_id} was left running long after its lease expired, and its {recoveries} recoveries "
                f"used up MAX_RECOVERIES={max_recoveries}",
                run_id=run_id,
            )
            status = landing.fail(
                run_id,
                token,
                parent_run_id,
                error=format_error(error),
                error_type=exception_path(error),
                final=True,
                delay=0.0,
                counts_as_failure=False,
            )
            if status is not None:
                repairs.append(Repair(run_id, "was left running long past its lease with no recovery left", "failed"))
        return repairs
