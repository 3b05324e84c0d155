"""Two-stage shutdown: the first SIGINT/SIGTERM drains gracefully, a second stops at once."""

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

    def stop_now(signum: int, frame: FrameType | None) -> None:
        logger.warning(
            "second %s: stopping at once; held runs are recovered when their leases expire", signal.Signals(signum).name
        )
        os._exit(128 + signum)

    def stop_gracefully(signum: int, frame: FrameType | None) -> None:
        for sig in _SIGNALS:
            signal.signal(sig, stop_now)
        worker.request_stop()

    for sig in _SIGNALS:
        signal.signal(sig, stop_gracefully)
