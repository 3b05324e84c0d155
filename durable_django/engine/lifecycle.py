"""The worker's go-between: everything a worker process asks of the runs it claims and holds.

The worker never speaks to the store itself; it claims batches, starts the
runs that waited for a slot, renews leases, lands successes in batches,
releases what it will not run and lands held runs cancelled, all through here.

A worker installs its pool of engine connections here (``engine_connections``),
and each call below borrows one of them for its duration (``store/pool.py``),
as do an attempt's writes (``Attempt.persist``) and the reconciler's and
scheduler's passes (``engine_connection``). A new call the worker makes belongs
under ``@_on_engine_connection`` too, or it opens a connection of its own in
the thread that calls it.
"""

from __future__ import annotations

import functools
import logging
import os
import socket
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from typing import ParamSpec, TypeVar

from django.db import DatabaseError

from ..conf import durable_settings
from ..registry import registry
from ..store import claims, health, journal, landing, leases, pauses, pool
from ..store import workers as worker_store
from ..store.claims import ClaimBounds as ClaimBounds  # the worker's (re-exported: it never imports the store)
from ..store.db import WAKE_CHANNEL as WAKE_CHANNEL  # the worker's
from ..store.db import is_disconnect
from ..store.db import reset_connection as reset_connection  # the worker's, and used here
from ..store.leases import Renewal
from ..store.schedules import database_now as _database_now
from ..store.sessions import listening as listening  # the worker's
from ..store.workers import WorkerIdentity as WorkerIdentity  # the worker's
from ..types import ClaimedRun
from . import batching, telemetry
from .attempt import Attempt
from .attempt_state import AttemptState, Outcome
from .outcomes import fail_attempt, finished, output_refused, report_success

logger = logging.getLogger("durable_django.worker")

_P = ParamSpec("_P")
_T = TypeVar("_T")


@contextmanager
def engine_connections(worker_id: str) -> Iterator[None]:
    """Give this process's engine ``DURABLE["ENGINE_CONNECTIONS"]`` connections for as long as a worker runs.

    They are named ``durable_worker <worker_id>`` in ``pg_stat_activity``, like the worker's LISTEN session.
    """
    with pool.installed(durable_settings.DATABASE, durable_settings.ENGINE_CONNECTIONS, f"durable_worker {worker_id}"):
        # The calling thread's own connection (the start-up checks') is not needed any more: the pool's are used.
        reset_connection()
        yield


def engine_connection() -> AbstractContextManager[object]:
    """One of the engine's connections for a ``with`` block (a helper thread's pass); none without a pool."""
    return pool.borrowed()


def _on_engine_connection(call: Callable[_P, _T]) -> Callable[_P, _T]:
    """Run ``call`` on one of the engine's connections."""

    @functools.wraps(call)
    def borrowing(*args: _P.args, **kwargs: _P.kwargs) -> _T:
        with pool.borrowed():
            return call(*args, **kwargs)

    return borrowing


def _on_engine_connection_first(call: Callable[_P, _T]) -> Callable[_P, _T]:
    """Run ``call`` on one of the engine's connections, served before the slots' calls when all are lent.

    For the claim loop's and the heartbeat's calls: slots wait for claims, and leases for renewals.
    """

    @functools.wraps(call)
    def borrowing(*args: _P.args, **kwargs: _P.kwargs) -> _T:
        with pool.borrowed(first=True):
            return call(*args, **kwargs)

    return borrowing


# The worker's clock for its cutoffs.
database_now = _on_engine_connection_first(_database_now)


@_on_engine_connection
def paused_summary() -> str:
    """What is paused, for the worker's start line and summaries: "function a, queue b", or "nothing"."""
    found = pauses.list_pauses()
    return ", ".join(f"function {p.function}" if p.function else f"queue {p.queue}" for p in found) or "nothing"


def claim_bounds(*, functions: list[str] | None, queues: list[str] | None, tenant_id: str | None) -> ClaimBounds:
    """The runs a worker with these options may claim: the (name, version) pairs it has, and task paths."""
    return claims.claim_filter(
        pairs=registry.pairs(functions), task_paths=True, names=functions, queues=queues, tenant_id=tenant_id
    )


@_on_engine_connection_first
def claim(
    *,
    limit: int,
    start_now: int,
    worker_id: str,
    bounds: ClaimBounds,
    lease_seconds: float | None = None,
    recover: bool = True,
) -> list[Attempt]:
    """Claim up to ``limit`` runs (the first ``start_now`` started at once) and load the journals of those that ran.

    The lease is ``DURABLE["LEASE_SECONDS"]`` unless ``lease_seconds`` says otherwise; ``recover`` False
    leaves runs whose lease ran out for a later claim (``store.claims.claim``).

    Returns:
        Attempts in claim order, started ones first.
    """
    lease = durable_settings.LEASE_SECONDS if lease_seconds is None else lease_seconds
    claimed = claims.claim(
        limit=limit, start_now=start_now, lease_seconds=lease, worker_id=worker_id, bounds=bounds, recover=recover
    )
    # A first attempt has an empty journal (but a fork's, which starts with a copy): skip the read.
    journals = journal.load_journal(
        [item.run.run_id for item in claimed if item.run.attempts > 1 or item.run.forked_from is not None]
    )
    attempts = []
    for item in claimed:
        attempt = Attempt(
            ClaimedRun(
                run=item.run,
                token=item.run.attempts,
                journal=journals.get(item.run.run_id, {}),
                recovered=item.recovered,
            ),
            item.database_now,
            started=item.started,
            due_since=item.due_since,
            previous_attempt_started_at=item.previous_attempt_started_at,
        )
        attempt.timeout = registry.timeout_of(item.run.name, item.run.version)
        attempts.append(attempt)
    return attempts


@_on_engine_connection_first
def seconds_until_next_due(bounds: ClaimBounds) -> float | None:
    return claims.seconds_until_next_due(bounds)


def start(attempt: Attempt) -> bool:
    """Start a claimed attempt that waited for a slot; False if the run is no longer this holder's.

    The slots that ask at once are started together, in one statement on one of the engine's connections.
    """
    if attempt.state is not AttemptState.CLAIMED:
        return False  # dropped while it waited: its lease went, or its run was cancelled
    cancel = batching.start(*attempt.held)
    if cancel is None:
        return False
    return attempt.mark_started(cancel_requested=cancel)


@_on_engine_connection_first
def renew(attempts: list[Attempt]) -> dict[tuple[str, int], Renewal]:
    """Extend the leases of held attempts, never more than a lease past an attempt's timeout (its holder lands
    the timeout first); one Renewal per (run id, token).

    A run whose renewal the database refuses on its own is reported not renewed, yet still held: the
    others are renewed, and its lease runs out unless a later renewal succeeds.

    Raises:
        DatabaseError: the database could not be reached.
    """
    renewals: dict[tuple[str, int], Renewal] = {}
    for members, renewed in batching.together_or_apart(attempts, _renew, what="lease renewals"):
        if isinstance(renewed, batching.Refused):
            [attempt] = members
            logger.warning(
                "run %s: its lease renewal failed (%s)",
                attempt.run.run_id,
                renewed.error,
                extra=telemetry.log_fields(attempt),
            )
            renewals[attempt.held] = Renewal(renewed=False, cancel_requested=False, held=True)
        else:
            renewals.update(renewed)
    return renewals


def _renew(attempts: list[Attempt]) -> dict[tuple[str, int], Renewal]:
    return leases.heartbeat(
        [attempt.held for attempt in attempts],
        durable_settings.LEASE_SECONDS,
        timeouts=[attempt.timeout for attempt in attempts],
    )


@dataclass
class LandingReport:
    """What landing a batch of successes did."""

    # Attempt -> the outcome it ended with (succeeded, lost, or failed when its output could not be stored).
    outcomes: dict[Attempt, Outcome] = field(default_factory=dict)
    # Still to land: the database could not be reached.
    retry: list[tuple[Attempt, str]] = field(default_factory=list)


@_on_engine_connection_first
def land_successes(batch: list[tuple[Attempt, str]]) -> LandingReport:
    """Land (attempt, output JSON) pairs succeeded, together in one statement where they can be, and end them.

    When the batch is refused for a reason other than an unreachable database,
    each run lands on its own, so one run the database will not store fails
    alone, for good, with the database's error (``OutputNotStored``), and the others succeed.
    """
    report = _land(batch)
    # Each landed attempt ends here; one a time limit stopped meanwhile is the claim loop's to end and count.
    report.outcomes = {attempt: outcome for attempt, outcome in report.outcomes.items() if attempt.end(outcome)}
    return report


def _complete(batch: list[tuple[Attempt, str]]) -> set[str]:
    return landing.complete_many([finished(attempt, output) for attempt, output in batch])


def _land(batch: list[tuple[Attempt, str]]) -> LandingReport:
    report = LandingReport()
    try:
        parts = batching.together_or_apart(batch, _complete, what="landings of successful attempts")
    except DatabaseError:
        reset_connection()
        report.retry = list(batch)
        return report
    for members, landed in parts:
        if not isinstance(landed, batching.Refused):
            for attempt, _ in members:
                report.outcomes[attempt] = report_success(attempt, attempt.run.run_id in landed)
            continue
        [(attempt, output)] = members
        if is_disconnect(landed.error):
            reset_connection()
            report.retry.append((attempt, output))
            continue
        report.outcomes[attempt] = fail_attempt(attempt, output_refused(attempt, landed.error), final=True)
    return report


@_on_engine_connection_first
def release(attempts: list[Attempt]) -> int:
    """Hand held runs back as pending, counting nothing; returns how many were still held.

    A run the database refuses to release on its own is left to its lease; the others are released.

    Raises:
        DatabaseError: the database could not be reached.
    """
    released = 0
    for members, count in batching.together_or_apart(attempts, _release, what="releases"):
        if isinstance(count, batching.Refused):
            logger.warning(
                "run %s could not be released (%s); its lease will expire", members[0].run.run_id, count.error
            )
        else:
            released += count
    return released


def _release(attempts: list[Attempt]) -> int:
    return claims.release([attempt.held for attempt in attempts])


def land_failed(attempt: Attempt, exc: BaseException) -> Outcome:
    """Land an attempt failed with an error that escaped its own landing (retried per its policy)."""
    return fail_attempt(attempt, exc)


@_on_engine_connection_first
def cancel_held(attempt: Attempt) -> bool:
    """Land a held run cancelled (its cancel was requested) and stop its attempt; False if the fence or a
    pivot refused it."""
    if landing.cancel_held(*attempt.held, attempt.run.parent_run_id) is None:
        return False
    attempt.stop(cancelled=True, lost=True)
    return True


@_on_engine_connection
def runs_by_status_and_queue() -> dict[tuple[str, str], int]:
    """Runs per (status, queue), at a cost that does not grow with the table (exact for small live sets)."""
    return health.runs_by_status_and_queue()


def worker_identity(
    *, worker_id: str, functions: list[str] | None, queues: list[str] | None, tenant_id: str | None, concurrency: int
) -> WorkerIdentity:
    """What a worker records about itself: where it runs, and the (function, version) pairs it can claim."""
    registered: dict[str, list[int]] = {}
    for name, version in registry.pairs(functions):
        registered.setdefault(name, []).append(version)
    return WorkerIdentity(
        worker_id=worker_id,
        host=socket.gethostname(),
        pid=os.getpid(),
        queues=queues,
        functions={name: sorted(versions) for name, versions in registered.items()},
        tenant_id=tenant_id,
        concurrency=concurrency,
    )


@_on_engine_connection
def worker_started(identity: WorkerIdentity) -> None:
    """Record a starting worker, and forget the workers gone for more than a day."""
    worker_store.prune()
    worker_store.seen(identity)


@_on_engine_connection_first
def worker_seen(identity: WorkerIdentity) -> None:
    """The worker is alive (its heartbeat): seen now."""
    worker_store.seen(identity)


@_on_engine_connection
def worker_stopped(worker_id: str) -> None:
    """The worker stopped gracefully: it is listed as gone at once, not after three leases."""
    worker_store.stopped(worker_id)


def database_unreachable(exc: BaseException) -> bool:
    """The error means the database could not be reached, rather than that it refused something."""
    return is_disconnect(exc)
