"""The worker's scheduler thread: settings sync, cron firing and the periodic purge.

Every worker runs one (unless ``--no-scheduler`` or ``--burst``). They need no
leader: each due schedule is fired under a row lock that the others skip, and
its tick's run key is unique, so any number of schedulers fire a tick once.
A scheduler fires only schedules of functions its worker has, within its
worker's tenant; a schedule nobody can run stays due and blocks nobody.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from datetime import timedelta
from typing import TYPE_CHECKING

from django.db import connections
from django.utils.translation import gettext, ngettext

from ..api import schedules as api_schedules
from ..conf import durable_settings
from ..engine import lifecycle, retention
from ..engine import schedules as engine_schedules
from ..exceptions import InvalidInput
from ..registry import registry
from ..storable import seconds
from .recovery import Recovering

if TYPE_CHECKING:  # the loop starts this thread: importing it at run time would be a cycle
    from ..engine.schedules import Fired
    from .loop import WorkerOptions

logger = logging.getLogger("durable_django.scheduler")

# Look for new or changed schedules at least this often (nothing notifies a schedule change).
MAX_WAIT_SECONDS = 5.0
# Added to each wait so that many workers do not all reach for the same tick at once.
FIRE_JITTER_SECONDS = 1.0
# Schedules fired per transaction; a full batch is followed by another at once.
FIRE_BATCH = 100
# Runs deleted per purge transaction.
PURGE_BATCH = 1000
# The periodic purge runs when the scheduler starts, then this often.
PURGE_INTERVAL_SECONDS = 3600.0
# The first wait after a database error; it doubles up to MAX_WAIT_SECONDS while errors go on.
FIRST_BACKOFF_SECONDS = 0.1


class SchedulerThread(threading.Thread):
    """Fires due schedules until ``halt_event`` is set.

    Args:
        options: the worker's WorkerOptions (its functions bound what it fires; its tenant, which schedules).
        halt_event: set when the worker shuts down.
    """

    def __init__(self, options: WorkerOptions, halt_event: threading.Event) -> None:
        super().__init__(name="durable-scheduler", daemon=True)
        self.options = options
        self.halt_event = halt_event
        self.names = sorted({name for name, _ in registry.pairs(options.functions)})
        self.tenant_id = options.tenant_id
        # Set once the settings sync has been attempted (tests wait for it).
        self.synced = threading.Event()
        self._sync_pending = True
        self._next_purge = time.monotonic()
        self._backoff = FIRST_BACKOFF_SECONDS

    def run(self) -> None:
        """Pass after pass until halted: any error is logged and the next pass tried, so the thread never dies."""
        try:
            while not self.halt_event.is_set():
                try:
                    with Recovering() as failure, lifecycle.engine_connection():
                        wait = self.step()
                    if failure.error is not None:
                        wait = self._back_off()
                        logger.warning("scheduler: database error (%s); retrying in %.1fs", failure.error, wait)
                except Exception:  # the scheduler must outlive a bug in one pass
                    logger.exception("scheduler: unexpected error; retrying in %.0fs", MAX_WAIT_SECONDS)
                    wait = MAX_WAIT_SECONDS
                self.halt_event.wait(wait)
        finally:
            self.synced.set()
            connections.close_all()

    def step(self) -> float:
        """One pass: sync settings until that has succeeded once, fire what is due, and purge when it is time.

        Returns:
            The seconds to wait before the next pass.
        """
        if self._sync_pending:
            self._sync_settings()
        self._pause_failed_schedules()
        refused = self._fire_due()
        self._purge_if_due()
        if refused:
            return self._back_off()  # the refused ticks are still due: retry them, slower while refusals go on
        self._backoff = FIRST_BACKOFF_SECONDS
        due = (
            engine_schedules.seconds_until_next_due(names=self.names, tenant_id=self.tenant_id) if self.names else None
        )
        wait = MAX_WAIT_SECONDS if due is None else min(max(due, 0.0), MAX_WAIT_SECONDS)
        return max(wait + random.uniform(0, FIRE_JITTER_SECONDS), 0.05)

    def _back_off(self) -> float:
        """The wait before retrying after a database error; each call in a row doubles the next."""
        wait, self._backoff = self._backoff, min(self._backoff * 2, MAX_WAIT_SECONDS)
        return wait

    def _fire_due(self) -> bool:
        """Fire due schedules batch after batch; True if the database refused a fire (its tick is still due)."""
        # Refused schedules keep their place at the head of the due order: later batches of this pass skip them.
        refused: list[str] = []
        while not self.halt_event.is_set():
            fired = engine_schedules.fire_due(
                names=self.names, tenant_id=self.tenant_id, limit=FIRE_BATCH, skip=refused
            )
            for outcome in fired:
                schedule = outcome.schedule
                if outcome.error is None:
                    self._log_ticks(outcome)
                elif outcome.postponed:
                    logger.error(
                        "schedule %s (tenant %s) could not fire (%s: %s); postponed by %s",
                        schedule.schedule_id,
                        schedule.tenant_id or "-",
                        type(outcome.error).__name__,
                        outcome.error,
                        engine_schedules.FIRE_FAILURE_BACKOFF,
                    )
                else:
                    refused.append(outcome.stored_id)
                    logger.warning(
                        "schedule %s (tenant %s): the database refused its tick %s (%s: %s); "
                        "still due, retried at the next pass",
                        schedule.schedule_id,
                        schedule.tenant_id or "-",
                        schedule.next_fire_at.isoformat(),
                        type(outcome.error).__name__,
                        outcome.error,
                    )
            if len(fired) < FIRE_BATCH:
                break
        return bool(refused)

    @staticmethod
    def _log_ticks(outcome: Fired) -> None:
        schedule = outcome.schedule
        for tick in outcome.ticks:
            if tick.run is not None and tick.action == "fired":
                logger.info(
                    "schedule %s fired its tick %s with run %s (%s)",
                    schedule.schedule_id,
                    tick.tick.isoformat(),
                    tick.run.run_id,
                    schedule.name,
                    extra={"run_id": tick.run.run_id, "function": tick.run.name},
                )
            else:
                logger.info(
                    "schedule %s: tick %s %s (overlap %s)",
                    schedule.schedule_id,
                    tick.tick.isoformat(),
                    {"skipped": "skipped", "buffered": "waits for the live run", "existed": "had a run already"}.get(
                        tick.action, tick.action
                    ),
                    schedule.overlap,
                )

    def _pause_failed_schedules(self) -> None:
        """Pause the schedules with pause_on_failure whose run failed, before anything fires again."""
        for stored_id, reason in engine_schedules.settle_ended_runs():
            logger.warning("schedule %s paused itself: %s", stored_id, reason)

    def _purge_if_due(self) -> None:
        purge_after = seconds(durable_settings.PURGE_AFTER, what='DURABLE["PURGE_AFTER"]')
        if purge_after is None or time.monotonic() < self._next_purge:
            return
        self._next_purge = time.monotonic() + PURGE_INTERVAL_SECONDS
        cutoff = lifecycle.database_now() - timedelta(seconds=purge_after)
        deleted = retention.purge_unless_another_worker_is(cutoff, PURGE_BATCH)
        if deleted is not None:  # None: another worker's turn
            logger.info(
                ngettext(
                    "purged %(count)d finished run older than %(seconds)gs",
                    "purged %(count)d finished runs older than %(seconds)gs",
                    deleted,
                ),
                {"count": deleted, "seconds": purge_after},
            )

    def _sync_settings(self) -> None:
        """Sync DURABLE["SCHEDULES"]; a failed sync is logged and tried again next pass, and never holds up firing."""
        try:
            with Recovering() as failure:
                upserted, deleted, invalid = engine_schedules.sync_settings_schedules(durable_settings.SCHEDULES)
        except InvalidInput as exc:
            # The setting itself is malformed: nothing changes that until the worker restarts.
            logger.error("scheduler: settings not synced: %s", exc)
            self._sync_pending = False
            return
        except Exception:  # the schedules already stored must fire all the same
            logger.exception("scheduler: settings sync failed; retrying at the next pass")
            return
        finally:
            self.synced.set()
        if failure.error is not None:
            logger.warning("scheduler: settings sync failed (%s); retrying at the next pass", failure.error)
            return
        self._sync_pending = False
        for schedule_id, error in invalid.items():
            logger.error('DURABLE["SCHEDULES"][%r] is invalid and was not synced: %s', schedule_id, error)
        if upserted:
            logger.info(
                ngettext(
                    "synced %(count)d schedule from settings",
                    "synced %(count)d schedules from settings",
                    len(upserted),
                ),
                {"count": len(upserted)},
            )
        if deleted:
            logger.info(
                ngettext(
                    "removed %(count)d schedule no longer declared in settings: %(ids)s",
                    "removed %(count)d schedules no longer declared in settings: %(ids)s",
                    len(deleted),
                ),
                {"count": len(deleted), "ids": ", ".join(_as_declared(stored) for stored in deleted)},
            )
        for schedule in api_schedules.list_schedules(tenant_id=self.tenant_id):
            if schedule.enabled and not registry.knows(schedule.name):
                logger.warning(
                    "schedule %s names function %r, which this worker does not have; it waits for a worker that does",
                    schedule.schedule_id,
                    schedule.name,
                )


def _as_declared(stored: str) -> str:
    """A stored schedule id as settings declare it: the id, and its tenant when it has one."""
    tenant, _, schedule_id = stored.partition(":")
    return (
        gettext("%(schedule_id)s (tenant %(tenant)s)") % {"schedule_id": schedule_id, "tenant": tenant}
        if tenant
        else schedule_id
    )
