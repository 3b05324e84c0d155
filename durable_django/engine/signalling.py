"""Sending the Django signals of ``durable_django.signals`` after the write they report commits.

A signal with no receiver costs one check. Receivers run after commit on the durable
alias (at once when no transaction is open), through ``send_robust``: one that raises
is logged and the others still run, and nothing they do can undo or fail the write.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from django.db import transaction
from django.dispatch import Signal

from .. import signals
from ..conf import durable_settings
from ..store import runs as run_store
from ..types import Run

if TYPE_CHECKING:
    from .attempt import Attempt

logger = logging.getLogger("durable_django.signals")

# The attempt outcomes after which the run itself has finished.
FINISHING_OUTCOMES = frozenset({"succeeded", "failed", "cancelled"})


def after_commit(signal: Signal, **kwargs: Any) -> None:
    """Send ``signal`` with ``Run`` as sender once the current transaction on the durable alias commits."""
    # A signal nobody connected to is told by its list of receivers alone; has_listeners() (locks, dead
    # references, the sender's filter) only when there are some.
    if not signal.receivers or not signal.has_listeners(Run):
        return
    transaction.on_commit(lambda: _send(signal, kwargs), using=durable_settings.DATABASE)


def _send(signal: Signal, kwargs: dict[str, Any]) -> None:
    for receiver, result in signal.send_robust(sender=Run, **kwargs):
        if isinstance(result, BaseException):
            logger.error(
                "a receiver of a durable_django signal raised; the run is unchanged: %s",
                receiver,
                exc_info=(type(result), result, result.__traceback__),
            )


def run_enqueued(run: Run) -> None:
    after_commit(signals.run_enqueued, run=run)


def attempt_started(attempt: Attempt) -> None:
    after_commit(signals.attempt_started, run=attempt.run, attempt=attempt.token)


def attempt_finished(attempt: Attempt, outcome: str) -> None:
    """The attempt's outcome landed; when it finished the run, ``run_finished`` follows with the run read back."""
    after_commit(signals.attempt_finished, run=attempt.run, attempt=attempt.token, outcome=outcome)
    if outcome in FINISHING_OUTCOMES:
        run_finished_by_id(attempt.run.run_id)


def run_finished_by_id(run_id: str) -> None:
    """Send ``run_finished`` with the run as it is stored now (only when someone listens)."""
    if not signals.run_finished.has_listeners(Run):
        return
    run = run_store.get_run(run_id, None)
    if run is not None:
        after_commit(signals.run_finished, run=run)


def runs_finished_by_ids(run_ids: list[str]) -> None:
    """``run_finished`` for each run, in order, as stored now, read in one statement (only when someone listens)."""
    if not run_ids or not signals.run_finished.has_listeners(Run):
        return
    runs = run_store.get_runs(run_ids)
    for run_id in run_ids:
        if run_id in runs:
            after_commit(signals.run_finished, run=runs[run_id])
