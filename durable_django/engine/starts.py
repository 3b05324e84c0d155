"""Starting claimed runs that waited for a slot, together: the slots that ask at once share one statement.

A worker claims a batch ahead of its slots while attempts are short; a slot that
frees takes one of those runs and starts it with a fenced write before any user
code. Under load every slot asks at once, and each start on a connection of its
own would hold one of the engine's few connections for a round trip, so the
slots would queue for connections. Instead the first slot to ask becomes the
leader: it starts every run asked for so far in one statement on one borrowed
connection (``store.claims.START_MANY``), hands each slot its answer, and
passes the lead to a slot that asked meanwhile, which starts the next batch. A
run another transaction has locked is started on its own by the slot that asked
for it (``START`` waits for the lock), so a batch never waits for a lock and
never takes part in a deadlock.
"""

from __future__ import annotations

import threading

from django.db import DatabaseError

from ..store import claims, pool


class _Request:
    """One slot's start: answered (``answered`` set) with ``started``/``cancel``/``busy`` or ``error``,
    or told to lead the next batch (``lead``)."""

    __slots__ = ("answered", "busy", "cancel", "error", "held", "lead", "started")

    def __init__(self, held: tuple[str, int]) -> None:
        self.held = held
        self.answered = threading.Event()
        self.lead = False
        self.started = False
        self.cancel = False
        self.busy = False
        self.error: BaseException | None = None


class Starts:
    """Batches the starts that slots ask for at the same time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._asked: list[_Request] = []
        self._leading = False

    def start(self, run_id: str, token: int) -> bool | None:
        """Start a claimed run; its cancel flag, or None if it is no longer this holder's.

        Raises:
            DatabaseError: the statement that started its batch failed (the run was not started).
        """
        request = _Request((run_id, token))
        with self._lock:
            self._asked.append(request)
            lead = not self._leading
            self._leading = True
        if not lead:
            request.answered.wait()
        if lead or request.lead:
            self._lead()
        if request.error is not None:
            raise _copy(request.error)
        if request.busy:
            with pool.borrowed():
                return claims.start(run_id, token)
        return request.cancel if request.started else None

    def _lead(self) -> None:
        """Start every run asked for so far in one statement, answer each slot, and pass the lead on."""
        with self._lock:
            batch, self._asked = self._asked, []
        try:
            with pool.borrowed():
                outcomes = claims.start_many([request.held for request in batch])
        except BaseException as exc:  # noqa: BLE001 - every slot of the batch is told, and raises it
            for request in batch:
                request.error = exc
        else:
            for request in batch:
                outcome = outcomes.get(request.held)
                if outcome is not None:
                    request.started, request.cancel, request.busy = (
                        outcome.started,
                        outcome.cancel_requested,
                        outcome.busy,
                    )
        with self._lock:
            successor = self._asked[0] if self._asked else None
            self._leading = successor is not None
        for request in batch:
            request.answered.set()
        if successor is not None:
            successor.lead = True
            successor.answered.set()


def _copy(exc: BaseException) -> BaseException:
    """The batch's error for one more slot to raise: a database error of the same kind and cause."""
    if isinstance(exc, DatabaseError):
        copy = type(exc)(*exc.args)
        copy.__cause__ = exc.__cause__
        return copy
    return exc
