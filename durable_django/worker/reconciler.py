"""The worker's reconciler thread: a pass every ``RECONCILE_SECONDS`` (one worker at a time repairs)."""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable

from django.db import connections

from .. import faults
from ..conf import durable_settings
from ..engine import lifecycle
from ..engine.reconciler import Reconciler, Repair
from .recovery import Recovering

logger = logging.getLogger("durable_django.reconciler")

# After a pass the database refused (a restart, a failover), the next comes this soon, then twice as late.
RETRY_SECONDS = 1.0


class ReconcilerThread(threading.Thread):
    """Runs reconciler passes until ``halt`` is set; reports each pass's repairs to ``on_repairs``.

    Nothing a pass meets ends the thread: a database error (its connection was cut) is a warning and the
    pass is tried again soon on a new connection; any other error is logged and the next pass comes as usual.
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
            retry = RETRY_SECONDS
            while not self.halt.wait(wait):
                wait = durable_settings.RECONCILE_SECONDS * random.uniform(0.9, 1.1)
                try:
                    with Recovering() as failure:
                        faults.reach("reconciler.pass")
                        with lifecycle.engine_connection():
                            repairs = self.reconciler.run_pass()
                    if failure.error is None:
                        self.on_repairs(repairs)
                        retry = RETRY_SECONDS
                    else:
                        wait = min(wait, retry)
                        retry *= 2
                        logger.warning("reconciler: pass failed (%s); trying again in %.0fs", failure.error, wait)
                except Exception:  # the reconciler must outlive any error in one pass
                    logger.exception("reconciler: pass failed; trying again at the next")
        finally:
            connections.close_all()
