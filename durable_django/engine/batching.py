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
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

from django.db import DatabaseError
from django.db.backends.base.base import BaseDatabaseWrapper

from ..store import claims, journal, pool
from ..store.db import from_json
from ..store.journal import Recorded

_Item = TypeVar("_Item")
_Outcome = TypeVar("_Outcome")


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

    def __init__(self, write_many: Callable[[list[_Item], BaseDatabaseWrapper | None], list[_Outcome]]) -> None:
        self._write_many = write_many
        self._lock = threading.Lock()
        self._asked: list[_Request[_Item, _Outcome]] = []
        self._leading = False

    def send(self, item: _Item) -> _Outcome:
        """Write ``item`` (with whatever other slots ask for meanwhile); returns its outcome.

        Raises:
            DatabaseError: the statement that wrote its batch failed (nothing of the batch was written).
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
        if alone:
            return self._write_alone(item)
        request.answered.wait()
        if request.lead:
            self._lead()
        if request.error is not None:
            raise _copy(request.error)
        return request.outcome  # type: ignore[return-value]  # set for every request of a batch that was written

    def _write_alone(self, item: _Item) -> _Outcome:
        """Lead with nobody waiting: write ``item`` by itself, then pass the lead to a slot that asked meanwhile."""
        try:
            with pool.lent() as conn:
                return self._write_many([item], conn)[0]
        finally:
            self._pass_lead()

    def _lead(self) -> None:
        """Write every item asked for so far in one statement, answer each slot, and pass the lead on."""
        with self._lock:
            batch, self._asked = self._asked, []
        try:
            with pool.lent() as conn:
                outcomes = self._write_many([request.item for request in batch], conn)
        except BaseException as exc:  # noqa: BLE001 - every slot of the batch is told, and raises it
            for request in batch:
                request.error = exc
        else:
            for request, outcome in zip(batch, outcomes, strict=True):
                request.outcome = outcome
        for request in batch:
            request.answered.set()
        self._pass_lead()

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


_starts: Batcher[tuple[str, int], claims.Start] = Batcher(_start_many)


def start(run_id: str, token: int) -> bool | None:
    """Start a claimed run that waited for a slot; its cancel flag, or None if it is no longer this holder's."""
    outcome = _starts.send((run_id, token))
    if outcome.busy:  # another transaction had it locked: start it alone, waiting for the lock
        with pool.borrowed():
            return claims.start(run_id, token)
    return outcome.cancel_requested if outcome.started else None


# -- step records ---------------------------------------------------------------------------------


_steps: Batcher[journal.StepWrite, journal.StepWritten] = Batcher(journal.record_steps)


def record_step(run_id: str, token: int, step_id: str, result_json: str) -> Recorded:
    """Journal a step (not a pivot) under the fence; returns the stored value (ours, or an earlier writer's).

    Raises:
        LeaseLost: the run is no longer this attempt's.
    """
    written = _steps.send(journal.StepWrite(run_id, token, step_id, result_json))
    if written.stored is None:
        # Not stored by the batch: an entry was there already, the fence refused it, or its run was
        # locked by another transaction. One statement of its own tells which (and waits for the lock).
        with pool.borrowed():
            return journal.record_step(run_id, token, step_id, result_json, pivot=False)
    return Recorded(from_json(written.stored), written.cancel_requested)
