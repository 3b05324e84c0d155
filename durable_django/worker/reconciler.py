"""The worker's reconciler thread: a pass every ``RECONCILE_SECONDS`` (one worker at a time repairs)."""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable

from django.db import connections

from ..conf import durable_settings
from ..engine.reconciler import Reconciler, Repair

logger = logging.getLogger("durable_django.reconciler")


class ReconcilerThread(threading.Thread):
    """Runs reconciler passes until ``halt`` is set; reports each pass's repairs to ``on_repairs``.

    Nothing a pass meets ends the thread: an error is logged and the next pass comes as usual.
    """

    def __init__(self, halt: threading.Event, on_repairs: Callable[[list[Repair]], None]):
        super().__init__(name="durable-reconciler", daemon=True)
        self.halt = halt
        self.on_repairs = on_repairs
        self.reconciler = Reconciler()

    def run(self) -> None:
        try:
            # A first pass soon after start, then spread out so that workers started together take turns.
            wait = random.uniform(0, 1) * min(durable_settings.RECONCILE_SECONDS, 5.0)
            while not self.halt.wait(wait):
                try:
                    self.on_repairs(self.reconciler.run_pass())
                except Exception:  # the reconciler must outlive any error in one pass
                    logger.exception("reconciler: pass failed; trying again at the next")
                wait = durable_settings.RECONCILE_SECONDS * random.uniform(0.9, 1.1)
        finally:
            connections.close_all()
