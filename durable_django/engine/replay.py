"""Noticing a replay that took another path than the journal's: the code changed under the run.

An attempt starts with the journal its claim read. Every context call asks for
one entry (its step id); an entry asked for is replayed. When a step executes
while entries of the claimed journal were never asked for, the handler went
another way than the code that journalled them did: that is a divergence. It
is logged, counted (``durable_replay_divergences_total``), recorded for the
run's admin page, and with ``DURABLE["STRICT_REPLAY"]`` fails the attempt with
``NonDeterministicReplay``. ``ctx.patched()`` reads the same record to tell a
run that passed a point before a patch from one that reaches it now.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

from ..conf import durable_settings
from ..exceptions import NonDeterministicReplay
from ..journal_ids import StepId
from ..store import divergences as divergence_store
from . import telemetry

if TYPE_CHECKING:
    from .attempt import Attempt

logger = logging.getLogger("durable_django.replay")

# The step name under which ``ctx.patched(patch_id)`` journals its answer.
PATCH_PREFIX = "@patch:"
# How many of the entries never asked for a divergence names in its log line and record.
SHOWN_ENTRIES = 10


def patch_step_name(patch_id: str) -> str:
    return f"{PATCH_PREFIX}{patch_id}"


class ReplayWatch:
    """The claimed journal's entries this attempt has not asked for yet."""

    __slots__ = ("_unasked", "reported")

    def __init__(self, journal: Iterable[str], version: int) -> None:
        # A timed wait's deadline entry is read with its wait, never asked for on its own; entries of another
        # version (a run resumed on a new version) are that version's path, not this code's.
        prefix = f"v{version}:"
        self._unasked = {sid for sid in journal if sid.startswith(prefix) and not sid.endswith(StepId.DEADLINE_SUFFIX)}
        self.reported = False

    def asked(self, sid: str) -> None:
        self._unasked.discard(sid)

    @property
    def replaying(self) -> bool:
        """True while the claimed journal holds entries this attempt has not reached."""
        return bool(self._unasked)

    def unasked(self) -> list[str]:
        return sorted(self._unasked)


def check_before_executing(attempt: Attempt, sid: str) -> None:
    """A step is about to execute: report a divergence if the claimed journal holds entries never asked for.

    Raises:
        NonDeterministicReplay: with ``DURABLE["STRICT_REPLAY"]``, so the attempt fails (and is retried
            per policy) instead of executing the step.
    """
    watch = attempt.replay
    if not watch.replaying:
        return
    unasked = watch.unasked()
    message = (
        f"run {attempt.run.run_id} ({attempt.run.name}) executes step {sid} while its journal holds "
        f"{len(unasked)} entr{'y' if len(unasked) == 1 else 'ies'} this replay never asked for "
        f"({', '.join(unasked[:SHOWN_ENTRIES])}): the code changed under the run"
    )
    if not watch.reported:
        watch.reported = True
        logger.warning(message, extra={"run_id": attempt.run.run_id, "function": attempt.run.name})
        telemetry.replay_diverged(attempt)
        attempt.persist(divergence_store.record, attempt.run.run_id, attempt.token, sid, unasked[:SHOWN_ENTRIES])
    if durable_settings.STRICT_REPLAY:
        raise NonDeterministicReplay(message, run_id=attempt.run.run_id, step=sid)
