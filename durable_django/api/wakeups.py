"""One LISTEN session per process that wakes every reader of events and streams waiting in it.

A reader subscribes to its run before it reads (so a write that commits after
its read is heard), reads, and waits for a wake-up; the hub's thread hears
``durable_stream`` (a write, a close) and ``durable_done`` (the run landed) and
wakes the run's readers: a thread's ``threading.Event``, or an event loop's
``asyncio.Event`` through ``call_soon_threadsafe``, so a waiting async reader
holds no thread. However many readers wait, the process holds one LISTEN
connection for them, and the small pool of read sessions in ``store.sessions``.

When the session breaks, the thread logs it, opens another after a backoff and
wakes every reader once it listens again (what was written in between is read
then). Behind a transaction pooler with no ``LISTEN_DATABASE`` there is no hub:
readers poll.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import logging
import threading
from collections import defaultdict
from typing import Protocol

from ..conf import durable_settings
from ..store.db import DONE_CHANNEL, STREAM_CHANNEL
from ..store.sessions import ReadSessions, listening

logger = logging.getLogger("durable_django.streams")

# How many sessions a process reads events and streams on, whatever the number of readers.
READ_SESSIONS = 4

# How long a subscriber waits for the hub's first LISTEN before it falls back to polling.
CONNECT_SECONDS = 5.0


class Waiter(Protocol):
    def wake(self) -> None: ...


class ThreadWaiter:
    """A waiting thread's wake-up."""

    def __init__(self) -> None:
        self.event = threading.Event()

    def wake(self) -> None:
        self.event.set()


class LoopWaiter:
    """A waiting coroutine's wake-up, set on its own event loop."""

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.event = asyncio.Event()

    def wake(self) -> None:
        with contextlib.suppress(RuntimeError):  # its loop is closed: nobody waits on it any more
            self.loop.call_soon_threadsafe(self.event.set)


class Hub:
    """The process's LISTEN session and the readers waiting on it, by run id."""

    BACKOFF_SECONDS = (0.1, 0.5, 1.0, 2.0, 5.0)

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiters: defaultdict[str, set[Waiter]] = defaultdict(set)
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self.listening = threading.Event()

    def subscribe(self, run_id: str, waiter: Waiter) -> None:
        """Wake ``waiter`` at every write to ``run_id``'s events and streams, and when it lands."""
        with self._lock:
            self._waiters[run_id].add(waiter)
            if self._thread is None and durable_settings.listen_database is not None:
                self._thread = threading.Thread(target=self._listen, name="durable-stream-listen", daemon=True)
                self._thread.start()
                # Closed at exit before what was registered earlier (an embedded PostgreSQL's own stop,
                # say), so that a script that read a stream does not end logging its session's failures.
                # Registered once, as late as the newest session: unregister drops an earlier registration.
                atexit.unregister(self.stop)
                atexit.register(self.stop)

    def unsubscribe(self, run_id: str, waiter: Waiter) -> None:
        with self._lock:
            waiting = self._waiters.get(run_id)
            if waiting is not None:
                waiting.discard(waiter)
                if not waiting:
                    del self._waiters[run_id]

    def wait_listening(self) -> bool:
        """Whether the hub listens (waiting for its first LISTEN a few seconds); False: poll."""
        if durable_settings.listen_database is None:
            return False
        return self.listening.wait(CONNECT_SECONDS)

    def stop(self) -> None:
        """Close the LISTEN session (its thread ends within a second); the next subscriber opens another."""
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is not None:
            self._stopping.set()
            thread.join()
            self._stopping.clear()
            self._wake(None)

    def _wake(self, run_id: str | None) -> None:
        with self._lock:
            if run_id is None:
                waiters = [waiter for waiting in self._waiters.values() for waiter in waiting]
            else:
                waiters = list(self._waiters.get(run_id, ()))
        for waiter in waiters:
            waiter.wake()

    def _listen(self) -> None:
        failures = 0
        while not self._stopping.is_set():
            try:
                with listening([STREAM_CHANNEL, DONE_CHANNEL]) as session:
                    self.listening.set()
                    failures = 0
                    self._wake(None)  # what was written while nobody listened is read now
                    while not self._stopping.is_set():
                        for notify in session.notifies(timeout=1.0):
                            self._wake(notify.payload)
                self.listening.clear()
            except Exception:
                self.listening.clear()
                self._wake(None)  # readers poll until it listens again
                delay = self.BACKOFF_SECONDS[min(failures, len(self.BACKOFF_SECONDS) - 1)]
                failures += 1
                logger.warning("the streams' LISTEN session failed; listening again in %.1fs", delay, exc_info=True)
                self._stopping.wait(delay)


hub = Hub()
reads = ReadSessions(READ_SESSIONS)


def close() -> None:
    """Close this process's LISTEN session and read sessions (before its database goes away: tests, shutdown)."""
    hub.stop()
    reads.close()
