"""LISTEN on a dedicated session so an idle worker wakes within milliseconds of a NOTIFY."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable

from ..engine import lifecycle

logger = logging.getLogger("durable_django.worker")


class Listener(threading.Thread):
    """Calls ``on_notify(channel, payload)`` for each notification on ``channels``; reconnects when cut off.

    Nothing it meets ends the thread: a lost connection or any other error is
    logged and the session opened again after a backoff (the poll keeps the
    worker going meanwhile).
    """

    def __init__(
        self,
        channels: Iterable[str],
        on_notify: Callable[[str, str], None],
        stop: threading.Event,
        *,
        on_reconnect: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(name="durable-listener", daemon=True)
        self.channels = list(channels)
        self.on_notify = on_notify
        self.on_reconnect = on_reconnect
        self.stop_event = stop

    def run(self) -> None:
        backoff = 0.1
        while not self.stop_event.is_set():
            try:
                with lifecycle.listening(self.channels) as conn:
                    backoff = 0.1
                    if self.on_reconnect:
                        self.on_reconnect()  # anything sent while we were away: look now
                    while not self.stop_event.is_set():
                        for notify in conn.notifies(timeout=0.5):
                            self.on_notify(notify.channel, notify.payload)
            except Exception as exc:  # noqa: BLE001 - the listener must outlive its connection and any bug
                logger.warning("listener lost its connection (%s); reconnecting in %.1fs", exc, backoff)
                self.stop_event.wait(backoff)
                backoff = min(backoff * 2, 5.0)
