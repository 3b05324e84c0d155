"""Writes that slots ask for at the same time, sent together: starts of claimed runs, and step records.

A worker's engine shares a few connections (``store/pool.py``). Under load every
slot writes at once, and a statement per slot would hold one of those few
connections for a round trip and a commit, so the slots would queue for
connections, and PostgreSQL would commit their writes one by one. Instead the
first slot to ask leads: it sends every write of the kind asked for so far in
one statement on one borrowed connection (one commit for them all), hands each
slot its answer, and passes the lead to a slot that asked meanwhile, which sends
the next batch. A slot alone sends its own write at once. Outside a worker (no
engine pool) nothing is batched: each write is its thread's own, and joins the
thread's transaction as every engine call does there.

Each write in a batch keeps its own guarantees: it is fenced on its own token,
and a run another transaction has locked is skipped (so a batch never waits
for a lock and never takes part in a deadlock) and written by its own slot
alone afterwards, as are the rare writes a batch cannot decide.

A batch is only as strong as its weakest member: one value the database
refuses fails the whole statement. So every write the worker shares between
runs (the batches here, and the lifecycle's landings, renewals and releases)
goes through ``together_or_apart``: a batch that fails for any reason but an
unreachable database is written again member by member, and only the member
that fails alone gets an error.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from django.db import DatabaseError
from django.db.backends.base.base import BaseDatabaseWrapper

from ..store import claims, journal, pool
from ..store.db import from_json, is_disconnect
from ..store.journal import Recorded

logger = logging.getLogger("durable_django.worker")

_Item = TypeVar("_Item")
_Outcome = TypeVar("_Outcome")
_Result = TypeVar("_Result")


@dataclass(frozen=True, slots=True)
class Refused:
    """A member of a batch that failed when written alone: its own error (a lost connection too, when the
    database went away while the members were written one by one)."""

    error: Exception


def together_or_apart(
    items: list[_Item], write: Callable[[list[_Item]], _Result], *, what: str
) -> list[tuple[list[_Item], _Result | Refused]]:
    """Write ``items`` in one call of ``write``; if that fails for a reason other than an unreachable
    database, write each alone, so one member the database refuses cannot fail the others.

    Returns:
        (members, what ``write`` returned for them, or the Refused error of a member written alone).

    Raises:
        DatabaseError: the database could not be reached for the batch (nothing is known of any member).
    """
    try:
        return [(items, write(items))]
    except Exception as exc:  # whatever one member's value makes the driver or the server raise
        if is_disconnect(exc):
            raise
        if len(items) == 1:
            return [(items, Refused(exc))]
        logger.warning("%d %s together failed (%s: %s); writing each alone", len(items), what, type(exc).__name__, exc)
    parts: list[tuple[list[_Item], _Result | Refused]] = []
    for item in items:
        try:
            parts.append(([item], write([item])))
        except Exception as exc:  # noqa: BLE001 - this member's own fault, for it alone
            parts.append(([item], Refused(exc)))
    return parts


class _Request(Generic[_Item, _Outcome]):
    """One slot's write: answered with ``outcome`` or ``error``, or told to lead the next batch (``lead``)."""

    __slots__ = ("answered", "error", "item", "lead", "outcome")

    def __init__(self, item: _Item) -> None:
        self.item = item
        self.answered = threading.Event()
        self.lead = False
        self.outcome: _Outcome | None = None
        self.error: BaseException | None = None


class Batcher(Generic[_Item, _Outcome]):
    """Sends the writes that threads ask for at the same time together.

    Args:
        write_many: writes a batch on the connection it is given (None: the calling thread's own) and
            returns one outcome per item, in order.
    """

    def __init__(
        self, write_many: Callable[[list[_Item], BaseDatabaseWrapper | None], list[_Outcome]], *, what: str
    ) -> None:
        self._write_many = write_many
        self._what = what
        self._lock = threading.Lock()
        self._asked: list[_Request[_Item, _Outcome]] = []
        self._leading = False

    def send(self, item: _Item) -> _Outcome:
        """Write ``item`` (with whatever other slots ask for meanwhile); returns its outcome.

        Raises:
            DatabaseError: the database could not be reached, or refused this item's write (written alone:
                another item's fault is never raised here). Another error the driver raised for this item.
        """
        if not pool.lending():
            # Outside a worker every thread writes on its own connection, inside its own transaction.
            return self._write_many([item], None)[0]
        with self._lock:
            alone = not self._leading
            self._leading = True
            if not alone:
                request: _Request[_Item, _Outcome] = _Request(item)
                self._asked.append(request)
        if alone:  # lead with nobody waiting: write the item by itself, then pass the lead on
            try:
                with pool.lent() as conn:
                    return self._write_many([item], conn)[0]
            finally:
                self._pass_lead()
        request.answered.wait()
        if request.lead:
            self._lead()
        if request.error is not None:
            raise _copy(request.error)
        return request.outcome  # type: ignore[return-value]  # set for every request of a batch that was written

    def _lead(self) -> None:
        """Write every item asked for so far in one statement, answer each slot, and pass the lead on."""
        with self._lock:
            batch, self._asked = self._asked, []
        try:
            parts = together_or_apart(batch, self._write_requests, what=self._what)
        except BaseException as exc:  # noqa: BLE001 - the database is gone: every slot is told, and sends again
            for request in batch:
                request.error = exc
        else:
            for members, written in parts:
                if isinstance(written, Refused):
                    members[0].error = written.error
                    continue
                for request, outcome in zip(members, written, strict=True):
                    request.outcome = outcome
        for request in batch:
            request.answered.set()
        self._pass_lead()

    def _write_requests(self, requests: list[_Request[_Item, _Outcome]]) -> list[_Outcome]:
        with pool.lent() as conn:
            return self._write_many([request.item for request in requests], conn)

    def _pass_lead(self) -> None:
        """Hand the lead to the first slot that asked since this batch was taken, or give it up."""
        with self._lock:
            successor = self._asked[0] if self._asked else None
            self._leading = successor is not None
        if successor is not None:
            successor.lead = True
            successor.answered.set()


def _copy(exc: BaseException) -> BaseException:
    """A batch's error for one more slot to raise: a database error of the same kind and cause."""
    if isinstance(exc, DatabaseError):
        copy = type(exc)(*exc.args)
        copy.__cause__ = exc.__cause__
        return copy
    return exc


# -- starts of claimed runs that waited for a slot ------------------------------------------------


def _start_many(held: list[tuple[str, int]], conn: BaseDatabaseWrapper | None) -> list[claims.Start]:
    with pool.borrowed():  # the connection lent to this batch, as the thread's own for the store's cursor()
        outcomes = claims.start_many(held)
    return [outcomes[key] for key in held]


_starts: Batcher[tuple[str, int], claims.Start] = Batcher(_start_many, what="starts")


def start(run_id: str, token: int) -> bool | None:
    """Start a claimed run that waited for a slot; its cancel flag, or None if it is no longer this holder's."""
    outcome = _starts.send((run_id, token))
    if outcome.busy:  # another transaction had it locked: start it alone, waiting for the lock
        with pool.borrowed():
            return claims.start(run_id, token)
    return outcome.cancel_requested if outcome.started else None


# -- step records ---------------------------------------------------------------------------------


_steps: Batcher[journal.StepWrite, journal.StepWritten] = Batcher(journal.record_steps, what="step records")


def record_step(run_id: str, token: int, step_id: str, result_json: str, duration: float | None = None) -> Recorded:
    """Journal a step (not a pivot) under the fence; returns the stored value (ours, or an earlier writer's).

    Raises:
        LeaseLost: the run is no longer this attempt's.
    """
    written = _steps.send(journal.StepWrite(run_id, token, step_id, result_json, duration))
    if written.stored is None:
        # Not stored by the batch: an entry was there already, the fence refused it, or its run was
        # locked by another transaction. One statement of its own tells which (and waits for the lock).
        with pool.borrowed():
            return journal.record_step(run_id, token, step_id, result_json, pivot=False, duration=duration)
    return Recorded(from_json(written.stored), written.cancel_requested)
