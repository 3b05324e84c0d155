"""Two-stage shutdown: the first SIGINT/SIGTERM drains gracefully, a second stops at once.

A Python signal handler runs in the main thread between two of its bytecodes, wherever that thread
is, the claim loop's wait on an event included: a handler that set that event itself would wait for
the lock its own thread holds, forever. So the handler only writes a byte to a pipe, and a relay
thread that reads the pipe asks the worker to stop.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from types import FrameType
from typing import Protocol

logger = logging.getLogger("durable_django.worker")
_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Stoppable(Protocol):
    """What the handlers stop: a worker that drains when asked."""

    def request_stop(self) -> None: ...


def install_shutdown_handlers(worker: Stoppable) -> None:
    if threading.current_thread() is not threading.main_thread():
        logger.warning("not on the main thread: SIGINT/SIGTERM handlers are not installed")
        return
    read_end, write_end = os.pipe()

    def relay() -> None:
        """Ask the worker to stop once the first signal's byte arrives (outside any signal handler)."""
        try:
            if os.read(read_end, 1):
                worker.request_stop()
        except Exception:  # the second signal still stops the process at once
            logger.exception("could not ask the worker to stop after a signal; a second one stops it at once")

    threading.Thread(target=relay, name="durable-signals", daemon=True).start()

    def stop_now(signum: int, frame: FrameType | None) -> None:
        # Logging's locks are reentrant: a handler interrupting the main thread mid-log still logs this.
        logger.warning(
            "second %s: stopping at once; held runs are recovered when their leases expire", signal.Signals(signum).name
        )
        os._exit(128 + signum)

    def stop_gracefully(signum: int, frame: FrameType | None) -> None:
        for sig in _SIGNALS:
            signal.signal(sig, stop_now)
        os.write(write_end, b"\0")

    for sig in _SIGNALS:
        signal.signal(sig, stop_gracefully)
