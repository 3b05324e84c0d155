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
        self.answered: threading.Event | None = None  # made only for a slot that waits
        self.lead = False
        self.outcome: _Outcome | None = None
        self.error: BaseException | None = None


class Batcher(Generic[_Item, _Outcome]):
    """Sends the writes that threads ask for at the same time together.

    Args:
        write_many: writes a batch on the calling thread's connection and returns one outcome per item, in order.
    """

    def __init__(self, write_many: Callable[[list[_Item]], list[_Outcome]]) -> None:
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
            return self._write_many([item])[0]
        request: _Request[_Item, _Outcome] = _Request(item)
        with self._lock:
            lead = not self._leading
            if not lead:
                request.answered = threading.Event()
            self._asked.append(request)
            self._leading = True
        if not lead:
            assert request.answered is not None
            request.answered.wait()
        if lead or request.lead:
            self._lead()
        if request.error is not None:
            raise _copy(request.error)
        return request.outcome  # type: ignore[return-value]  # set for every request of a batch that was written

    def _lead(self) -> None:
        """Write every item asked for so far in one statement, answer each slot, and pass the lead on."""
        with self._lock:
            batch, self._asked = self._asked, []
        try:
            with pool.borrowed():
                outcomes = self._write_many([request.item for request in batch])
        except BaseException as exc:  # noqa: BLE001 - every slot of the batch is told, and raises it
            for request in batch:
                request.error = exc
        else:
            for request, outcome in zip(batch, outcomes, strict=True):
                request.outcome = outcome
        with self._lock:
            successor = self._asked[0] if self._asked else None
            self._leading = successor is not None
        for request in batch:
            if request.answered is not None:
                request.answered.set()
        if successor is not None:
            assert successor.answered is not None
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


def _start_many(held: list[tuple[str, int]]) -> list[claims.Start]:
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
