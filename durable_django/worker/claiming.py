"""What the claim loop asks for at each pass: one run for each idle slot, started in the claim, and, at
most once a second or when nothing else is due, the runs whose holder's lease ran out.

The claim's expired-lease arm reads the leases index from its oldest entry. While a transaction pins the
xmin horizon (a client's idle transaction, a long report on the same database) nothing removes the
entries every claim and renewal since has left behind, and that arm walked all of them at every claim to
find nothing: in the independent harness's idle-in-transaction cell, 10,000 buffers a claim. A lease is
taken over only once it has run out, tens of seconds after its holder stopped renewing it, so looking for
such runs once a second, and at once whenever a claim finds nothing else, loses nothing that matters.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from django.utils.translation import gettext

from ..engine import lifecycle, telemetry
from ..engine.attempt import Attempt
from ..engine.lifecycle import ClaimBounds
from ..engine.log_words import claim_words
from .slots import SlotPool
from .stats import Stats

if TYPE_CHECKING:
    from collections.abc import Callable

logger = logging.getLogger("durable_django.worker")

# The most a claim loop with work to do goes without looking for runs whose lease ran out.
RECOVERY_CHECK_SECONDS = 1.0


class Claimer:
    """The claim loop's claims: how many to ask for, and when to look for expired leases too."""

    def __init__(
        self,
        pool: SlotPool,
        *,
        worker_id: str,
        bounds: ClaimBounds,
        stats: Stats,
        on_database: Callable[[bool], None],
        recovery_check_seconds: float = RECOVERY_CHECK_SECONDS,
    ) -> None:
        self._pool = pool
        self._worker_id = worker_id
        self._bounds = bounds
        self._stats = stats
        self._on_database = on_database
        self._recovery_check_seconds = recovery_check_seconds
        self._next_recovery_check = time.monotonic()

    def claim(self) -> tuple[list[Attempt], int]:
        """Claim a run for each idle slot, each started by the claim; returns (claimed, asked)."""
        idle = self._pool.idle_slots()
        if idle == 0:
            return [], 0
        recover = time.monotonic() >= self._next_recovery_check
        claimed = self._claim(idle, recover=recover)
        if not claimed and not recover:
            claimed = self._claim(idle, recover=True)  # nothing else is due: look now
        if logger.isEnabledFor(logging.INFO):  # the words cost a translation lookup per run: only when logged
            for attempt in claimed:
                _log_claim(attempt)
        self._stats.claimed += len(claimed)
        self._pool.add(claimed)
        return claimed, idle

    def _claim(self, idle: int, *, recover: bool) -> list[Attempt]:
        if recover:
            self._next_recovery_check = time.monotonic() + self._recovery_check_seconds
        claimed = lifecycle.claim(
            limit=idle, start_now=idle, worker_id=self._worker_id, bounds=self._bounds, recover=recover
        )
        self._on_database(True)
        return claimed


def _log_claim(attempt: Attempt) -> None:
    run = attempt.run
    logger.info(
        gettext("claimed run %(run_id)s (%(function)s v%(version)s): %(claim)s, recovered from a dead worker")
        if attempt.recovered
        else gettext("claimed run %(run_id)s (%(function)s v%(version)s): %(claim)s"),
        {
            "run_id": run.run_id,
            "function": run.name,
            "version": run.version,
            "claim": claim_words(attempt.token, run.failures),
        },
        extra=telemetry.log_fields(attempt),
    )
