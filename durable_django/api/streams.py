"""Reading a run while it runs: its events (``get_event``, ``list_events``) and streams (``read_stream``).

Every read is of what is committed, on the process's read sessions (never the
caller's connection or transaction), and every wait is on the process's one
LISTEN session (``wakeups``): a reader subscribes before it reads, so nothing
committed after its read goes unheard. A reader of an unknown run, or of
another tenant's, gets ``RunNotFound`` at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncGenerator, AsyncIterator, Generator, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any
from uuid import UUID

from .. import faults
from ..conf import durable_settings
from ..engine.publishing import key_of
from ..exceptions import RunNotFound
from ..storable import integer, seconds
from ..store import stream_reads as stream_store
from ..tenancy import normalize_tenant
from ..types import StreamItem
from .runs import run_id_of
from .wakeups import LoopWaiter, ThreadWaiter, hub, reads

# The most items one read fetches; a reader that gets this many reads again at once.
READ_BATCH = 500

# Between re-reads while listening: a safety net for a wake-up lost with a broken session.
LISTENING_RECHECK_SECONDS = 5.0
FIRST_POLL_SECONDS = 0.05


@dataclass
class _Wait:
    """How long a reader waits next: until its deadline, re-reading now and then (often while it polls)."""

    limit: float | None
    deadline: float | None = field(init=False)
    poll: float = FIRST_POLL_SECONDS

    def __post_init__(self) -> None:
        self.deadline = None if self.limit is None else time.monotonic() + self.limit

    def remaining(self) -> float | None:
        return None if self.deadline is None else self.deadline - time.monotonic()

    def next(self, listening: bool) -> float:
        """Seconds to wait before the next read (0: the deadline has passed)."""
        if listening:
            pause = LISTENING_RECHECK_SECONDS
        else:
            pause, self.poll = self.poll, min(self.poll * 2, float(durable_settings.POLL_SECONDS))
        remaining = self.remaining()
        return pause if remaining is None else max(0.0, min(pause, remaining))


@dataclass
class _StreamRead:
    """One reader's place in a stream, and what a read of it tells."""

    run_id: str
    key: str
    after: int
    tenant_id: str | None
    done: bool = False

    def take(self, read: stream_store.ItemsRead | None) -> list[StreamItem]:
        """The items of a read, in offset order; ``done`` once the stream has ended and all of it is read."""
        if read is None:
            raise RunNotFound(f"no run {self.run_id}", run_id=self.run_id)
        if read.items:
            self.after = read.items[-1].offset
        if len(read.items) < READ_BATCH and (read.closed or not read.run_live):
            self.done = True
        return read.items

    def args(self) -> tuple[Any, ...]:
        return (self.run_id, self.key, self.after, self.tenant_id, READ_BATCH)


def _stream_read(
    run_id: object, key: object, after: object, timeout: object, tenant_id: object
) -> tuple[_StreamRead, float | None]:
    return (
        _StreamRead(
            run_id_of(run_id),
            key_of(key, what="a stream key"),
            integer(after, what="after", minimum=-1, maximum=2**31 - 1),
            normalize_tenant(tenant_id),
        ),
        seconds(timeout, what="timeout"),
    )


def read_stream(
    run_id: str | UUID,
    key: str,
    *,
    after: int = -1,
    timeout: timedelta | float | None = None,
    tenant_id: str | UUID | None = None,
) -> Iterator[StreamItem]:
    """The items of a run's stream after offset ``after``, in offset order, as they are written.

    It stops when the stream is closed or its run has finished, once every item
    is read. Bad arguments raise here; an unknown run (or another tenant's)
    raises ``RunNotFound`` at the first item.

    Raises:
        InvalidInput: a bad run id, key, offset, timeout or tenant.
        RunNotFound: no such run is visible to ``tenant_id``.
        TimeoutError: the stream had not ended within ``timeout``.
    """
    reader, limit = _stream_read(run_id, key, after, timeout, tenant_id)
    return (item for item in _read_stream(reader, _Wait(limit), None) if item is not None)


def read_stream_ticking(
    run_id: str | UUID, key: str, *, after: int, tenant_id: str | UUID | None, tick: float
) -> Generator[StreamItem | None]:
    """``read_stream`` that also yields None after each ``tick`` seconds without an item (a keep-alive's turn)."""
    reader, _ = _stream_read(run_id, key, after, None, tenant_id)
    return _read_stream(reader, _Wait(None), tick)


def _read_stream(reader: _StreamRead, wait: _Wait, tick: float | None) -> Generator[StreamItem | None]:
    waiter = ThreadWaiter()
    hub.subscribe(reader.run_id, waiter)
    try:
        listening = hub.wait_listening()
        quiet = _Quiet(tick)
        while True:
            waiter.event.clear()
            items = reader.take(reads.submit_shared(stream_store.read_items, *reader.args()).result())
            quiet.heard(items)
            yield from items
            if reader.done:
                return
            faults.reach("stream.read")
            pause = wait.next(listening and hub.listening.is_set())
            if pause <= 0:
                raise _timed_out(reader, wait)
            waiter.event.wait(quiet.within(pause))
            if quiet.over():
                yield None
    finally:
        hub.unsubscribe(reader.run_id, waiter)


def aread_stream(
    run_id: str | UUID,
    key: str,
    *,
    after: int = -1,
    timeout: timedelta | float | None = None,
    tenant_id: str | UUID | None = None,
) -> AsyncIterator[StreamItem]:
    """``read_stream`` for ``async for``: while it waits it holds no thread (see ``wakeups``)."""
    reader, limit = _stream_read(run_id, key, after, timeout, tenant_id)
    return _without_ticks(_aread_stream(reader, _Wait(limit), None))


def aread_stream_ticking(
    run_id: str | UUID, key: str, *, after: int, tenant_id: str | UUID | None, tick: float
) -> AsyncGenerator[StreamItem | None]:
    """``aread_stream`` that also yields None after each ``tick`` seconds without an item."""
    reader, _ = _stream_read(run_id, key, after, None, tenant_id)
    return _aread_stream(reader, _Wait(None), tick)


async def _without_ticks(items: AsyncGenerator[StreamItem | None]) -> AsyncIterator[StreamItem]:
    try:
        async for item in items:
            if item is not None:
                yield item
    finally:
        await items.aclose()


async def _aread_stream(reader: _StreamRead, wait: _Wait, tick: float | None) -> AsyncGenerator[StreamItem | None]:
    waiter = LoopWaiter()
    hub.subscribe(reader.run_id, waiter)
    try:
        listening = hub.listening.is_set() or await asyncio.to_thread(hub.wait_listening)
        quiet = _Quiet(tick)
        while True:
            waiter.event.clear()
            items = reader.take(await asyncio.wrap_future(reads.submit_shared(stream_store.read_items, *reader.args())))
            quiet.heard(items)
            for item in items:
                yield item
            if reader.done:
                return
            faults.reach("stream.read")
            pause = wait.next(listening and hub.listening.is_set())
            if pause <= 0:
                raise _timed_out(reader, wait)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(waiter.event.wait(), quiet.within(pause))
            if quiet.over():
                yield None
    finally:
        hub.unsubscribe(reader.run_id, waiter)


def _timed_out(reader: _StreamRead, wait: _Wait) -> TimeoutError:
    return TimeoutError(f"stream {reader.key!r} of run {reader.run_id} had not ended after {wait.limit}s")


class _Quiet:
    """How long a ticking reader has gone without yielding: its tick is due after ``tick`` seconds of it."""

    def __init__(self, tick: float | None) -> None:
        self.tick = tick
        self.since = time.monotonic()

    def heard(self, items: list[StreamItem]) -> None:
        if items:
            self.since = time.monotonic()

    def within(self, pause: float) -> float:
        """``pause``, shortened to end when the next tick is due."""
        if self.tick is None:
            return pause
        return max(0.0, min(pause, self.since + self.tick - time.monotonic()))

    def over(self) -> bool:
        """Whether a tick is due now (then the next one counts from now)."""
        if self.tick is None or time.monotonic() < self.since + self.tick:
            return False
        self.since = time.monotonic()
        return True


def get_event(
    run_id: str | UUID,
    key: str,
    *,
    timeout: timedelta | float | None = None,
    default: Any = None,
    tenant_id: str | UUID | None = None,
) -> Any:
    """The value a run published under ``key``: at once if it has one, else as soon as it does.

    Returns ``default`` at the timeout, or at once when the run has finished
    without publishing it (it never will).

    Raises:
        InvalidInput: a bad run id, key, timeout or tenant.
        RunNotFound: no such run is visible to ``tenant_id``.
    """
    run, checked = run_id_of(run_id), key_of(key, what="an event key")
    tenant, wait = normalize_tenant(tenant_id), _Wait(seconds(timeout, what="timeout"))
    waiter = ThreadWaiter()
    hub.subscribe(run, waiter)
    try:
        listening = hub.wait_listening()
        while True:
            waiter.event.clear()
            read = reads.submit(stream_store.read_event, run, checked, tenant).result()
            if read is None:
                raise RunNotFound(f"no run {run}", run_id=run)
            if read.value is not None:
                return read.value[0]
            if not read.run_live:
                return default
            pause = wait.next(listening and hub.listening.is_set())
            if pause <= 0:
                return default
            waiter.event.wait(pause)
    finally:
        hub.unsubscribe(run, waiter)


def list_events(run_id: str | UUID, *, tenant_id: str | UUID | None = None) -> dict[str, Any]:
    """Every event a run has published, by key (the latest value of each), as committed now.

    Raises:
        RunNotFound: no such run is visible to ``tenant_id``.
    """
    run = run_id_of(run_id)
    events = reads.submit(stream_store.list_events, run, normalize_tenant(tenant_id)).result()
    if events is None:
        raise RunNotFound(f"no run {run}", run_id=run)
    return events


def stream_is_readable(run_id: str | UUID, key: str, *, tenant_id: str | UUID | None = None) -> bool:
    """Whether the run exists and is visible to ``tenant_id`` (its stream ``key`` need not be written yet)."""
    run = run_id_of(run_id)
    read = reads.submit(stream_store.read_items, run, key_of(key), -1, normalize_tenant(tenant_id), 0).result()
    return read is not None
