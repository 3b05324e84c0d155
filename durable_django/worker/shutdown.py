"""Two-stage shutdown: the first SIGINT/SIGTERM drains gracefully, a second stops at once."""

from __future__ import annotations

import logging
import os
import signal
import threading

logger = logging.getLogger("durable_django.worker")
_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def install_shutdown_handlers(worker) -> None:
    if threading.current_thread() is not threading.main_thread():
        logger.warning("not on the main thread: SIGINT/SIGTERM handlers are not installed")
        return

    def stop_now(signum, frame):
        logger.warning(
            "second %s: stopping at once; held runs are recovered when their leases expire", signal.Signals(signum).name
        )
        os._exit(128 + signum)

    def stop_gracefully(signum, frame):
        for sig in _SIGNALS:
            signal.signal(sig, stop_now)
        worker.request_stop()

    for sig in _SIGNALS:
        signal.signal(sig, stop_gracefully)
