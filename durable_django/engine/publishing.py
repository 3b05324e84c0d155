"""What a handler publishes while it runs: ``ctx.set_event``, ``ctx.write_stream``, ``ctx.close_stream``.

From the handler's body each write is a durable step: the n-th body write of a
key in a run is stored once, and a replay (a later attempt passing the same
call again) writes nothing. Its identity is its position, as a step's is its
name: the context counts the body's writes of each key, and the store keeps
how many of them committed, on the event's or the stream's own row (not in
the journal: a fork's copied journal must not stop the new run from writing
its own stream). From inside a step's ``fn`` a write is stored at once, every
time: a step that runs again writes again (at least once).
"""

from __future__ import annotations

from collections.abc import Callable

from ..exceptions import InvalidInput
from ..storable import json_text, name
from ..store import streams as stream_store
from .attempt import Attempt


def key_of(key: object, *, what: str = "an event or stream key") -> str:
    """A key as the storable domain allows names: a non-empty string PostgreSQL can store, of at most 512 characters.

    Raises:
        InvalidInput: it is not one.
    """
    return name(key, what=what)


def value_json(value: object, *, what: str) -> str:
    """A published value as JSON text the storable domain allows (within ``DURABLE["MAX_VALUE_BYTES"]``).

    Raises:
        InvalidInput: not JSON, holding a NUL or a lone surrogate, too deep or too large.
    """
    return json_text(value, what=what)


class Publisher:
    """The body's writes of one attempt: how many of each key it has made, and how many the run has stored."""

    def __init__(self, attempt: Attempt) -> None:
        self._attempt = attempt
        # (kind, key) -> the body writes this attempt has made of it so far.
        self._made: dict[tuple[str, str], int] = {}
        # (kind, key) -> the body writes of it the run had committed when this attempt last asked.
        self._stored: dict[tuple[str, str], int] = {}

    def set_event(self, key: str, encoded: str, *, in_step: bool) -> bool:
        """Publish an event's value; returns whether a cancel was requested."""
        return self._write("event", key, encoded, in_step, stream_store.set_event)

    def write_stream(self, key: str, encoded: str, *, in_step: bool) -> bool:
        """Append to a stream; returns whether a cancel was requested.

        Raises:
            InvalidInput: the stream is closed.
        """
        return self._write("stream", key, encoded, in_step, stream_store.write_item)

    def close_stream(self, key: str) -> bool:
        """Close a stream (closing it again changes nothing); returns whether a cancel was requested."""
        attempt = self._attempt
        return attempt.persist(stream_store.close_stream, attempt.run.run_id, attempt.token, key).cancel_requested

    def _write(self, kind: str, key: str, encoded: str, in_step: bool, write: stream_store.Write) -> bool:
        attempt = self._attempt
        run_id = attempt.run.run_id
        if in_step:
            written = attempt.persist(write, run_id, attempt.token, key, encoded, None)
            if not written.stored:
                raise InvalidInput(f"stream {key!r} of run {run_id} is closed; nothing more can be written to it")
            return written.cancel_requested
        position = self._made.get((kind, key), 0)
        self._made[(kind, key)] = position + 1
        if position < self._stored.get((kind, key), 0):
            return False  # a replay: this write committed in an earlier attempt
        written = attempt.persist(write, run_id, attempt.token, key, encoded, position)
        if written.stored:
            self._stored[(kind, key)] = position + 1
            return written.cancel_requested
        # Not stored: written before (a replay, or an answer lost and the write sent again), or closed.
        stored = attempt.persist(stream_store.body_writes, run_id, key)
        count = stored.stream if kind == "stream" else stored.event
        if count > position:
            self._stored[(kind, key)] = count
            return written.cancel_requested
        raise InvalidInput(f"stream {key!r} of run {run_id} is closed; nothing more can be written to it")


class PublishingCalls:
    """``ctx.set_event``, ``ctx.write_stream`` and ``ctx.close_stream``, for the sync context.

    The context provides the attempt, its publisher, the stop checks, and
    ``in_steps``: how many steps' fns are running (a write made inside one is
    at-least-once, not a step of the body).
    """

    _attempt: Attempt
    _publisher: Publisher
    in_steps: int

    def _check(self) -> None:
        raise NotImplementedError

    def _outside_handler_transaction(self, call: str) -> None:
        raise NotImplementedError

    # -- events and streams ------------------------------------------------

    def set_event(self, key: str, value: object, *, in_step: bool | None = None) -> None:
        """Publish ``value`` (JSON) under ``key`` for readers of the run (``get_event``); the latest write wins.

        From the body it is a durable step (a replay writes nothing again); inside a step's ``fn`` it
        is written at once, each time the step runs. ``in_step`` overrides which (the async context's).
        """
        self._publish(
            "ctx.set_event()", key, value, lambda k, v, s: self._publisher.set_event(k, v, in_step=s), in_step
        )

    def write_stream(self, key: str, value: object, *, in_step: bool | None = None) -> None:
        """Append ``value`` (JSON) to the stream ``key`` (``read_stream``), durably as ``set_event`` is.

        Raises:
            InvalidInput: a bad key or value, or the stream is closed.
        """
        self._publish(
            "ctx.write_stream()", key, value, lambda k, v, s: self._publisher.write_stream(k, v, in_step=s), in_step
        )

    def close_stream(self, key: str) -> None:
        """Close the stream ``key``: its readers stop once they have read it all. A run's end closes them all."""
        with self._attempt.engine_code():
            self._check()
            checked = key_of(key, what="a stream key")
            self._outside_handler_transaction("ctx.close_stream()")
            if self._publisher.close_stream(checked):
                self._attempt.request_cancel()

    def _publish(
        self, call: str, key: str, value: object, write: Callable[[str, str, bool], bool], in_step: bool | None
    ) -> None:
        with self._attempt.engine_code():
            self._check()
            checked = key_of(key)
            encoded = value_json(value, what=f"the value of {checked!r}")
            self._outside_handler_transaction(call)
            if write(checked, encoded, self.in_steps > 0 if in_step is None else in_step):
                self._attempt.request_cancel()
