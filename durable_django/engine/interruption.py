"""Where an attempt's handler runs, so that a stop from another thread can interrupt its user code.

A sync handler is interrupted by an asynchronous exception sent to its thread
while it runs user code (never inside the engine's own code, which context
methods mark); an async one by cancelling its task. The attempt decides when to
stop (``Attempt._interrupt``); this holds where its thread is, and guards it
with the attempt's own lock, so a state change and the interrupt it calls for
are one step.
"""

from __future__ import annotations

import asyncio
import ctypes
import sys
import threading
import traceback
from contextlib import AbstractContextManager, suppress
from typing import Any


class HandlerThread:
    """The thread an attempt's handler runs in: inside user code or not, and an exception already sent.

    Args:
        lock: the attempt's lock; ``interrupt`` and ``clear`` are called with it held, the rest take it.
    """

    def __init__(self, lock: threading.Lock) -> None:
        self._lock = lock
        self._thread_id: int | None = None
        self._in_user_code = False
        self._interrupted = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[Any] | None = None

    def user_code(self) -> AbstractContextManager[None]:
        """Mark a stretch of user code that a stop may interrupt."""
        return _Boundary(self, user=True)

    def engine_code(self) -> AbstractContextManager[None]:
        """Mark engine code inside a handler (context methods) that must not be interrupted."""
        return _Boundary(self, user=False)

    def bind_async(self, loop: asyncio.AbstractEventLoop | None, task: asyncio.Task[Any] | None) -> None:
        """Route stops to an async handler's task (None, None once its event loop is gone)."""
        with self._lock:
            self._loop, self._task = loop, task

    def where(self) -> str:
        """The handler thread's stack as it is now (where a stuck handler is stuck), or ""."""
        frame = sys._current_frames().get(self._thread_id) if self._thread_id is not None else None
        return "".join(traceback.format_stack(frame)) if frame is not None else ""

    def interrupt(self, exc: type[BaseException]) -> None:
        """Cancel the async handler's task, or raise ``exc`` in the thread if it runs user code (lock held)."""
        if self._task is not None and self._loop is not None:
            # The loop may have closed since (the handler ended between the caller's look and this call).
            with suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._task.cancel)
        elif self._in_user_code and not self._interrupted and self._thread_id is not None:
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(self._thread_id), ctypes.py_object(exc))
            self._interrupted = True

    def clear(self) -> None:
        """Withdraw an exception sent that the thread has not raised yet (lock held)."""
        if self._interrupted and self._thread_id is not None:
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(self._thread_id), None)
        self._interrupted = False


class _Boundary:
    """Where user code begins or ends inside an attempt (``HandlerThread.user_code`` and ``engine_code``).

    A class rather than a generator: every step crosses three of them.
    """

    __slots__ = ("_previous", "_thread", "_user")

    def __init__(self, thread: HandlerThread, *, user: bool) -> None:
        self._thread = thread
        self._user = user
        self._previous = False

    def __enter__(self) -> None:
        thread = self._thread
        with thread._lock:
            if self._user:
                thread._thread_id = threading.get_ident()
            self._previous, thread._in_user_code = thread._in_user_code, self._user
            if not self._user:
                thread.clear()

    def __exit__(self, *exc: object) -> None:
        thread = self._thread
        with thread._lock:
            thread._in_user_code = self._previous
            if self._user:
                thread.clear()
