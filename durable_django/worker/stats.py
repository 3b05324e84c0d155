"""What a worker counts while it runs, and the summary line it logs every ``SUMMARY_SECONDS`` and at exit."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from ..engine.attempt_state import Outcome

logger = logging.getLogger("durable_django.worker")


@dataclass
class Stats:
    claimed: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)
    # Runs the reconciler found in a state that must not exist, and repaired.
    repaired: int = 0
    # Runs this worker failed because their deadline had passed while nobody held them.
    expired: int = 0
    started: float = field(default_factory=time.monotonic)

    def count(self, outcome: Outcome) -> None:
        self.outcomes[outcome.value] = self.outcomes.get(outcome.value, 0) + 1

    def log_summary(self, *, running: int, stuck_threads: int, paused: str) -> None:
        elapsed = max(time.monotonic() - self.started, 1e-9)
        outcomes = self.outcomes
        logger.info(
            "summary: claimed %d, running %d, succeeded %d, failed %d, retrying %d, suspended %d, "
            "cancelled %d, repaired %d, timed out %d, past deadline %d, stuck threads %d, %.1f runs/s, paused: %s",
            self.claimed,
            running,
            outcomes.get("succeeded", 0),
            outcomes.get("failed", 0),
            outcomes.get("retrying", 0),
            outcomes.get("suspended", 0),
            outcomes.get("cancelled", 0),
            self.repaired,
            outcomes.get("timed_out", 0),
            self.expired,
            stuck_threads,
            sum(outcomes.values()) / elapsed,
            paused,
        )
