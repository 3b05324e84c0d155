"""What both contexts share: the attempt's read-only facts.

``RunFacts`` is what a handler (and a plug-in running one, such as the Django
Tasks runtime) may read of its attempt without reaching into the engine.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ..types import Run
from .attempt import Attempt


class RunFacts:
    """The read-only facts of an attempt that a handler (and a plug-in running one) may read."""

    _attempt: Attempt

    @property
    def run_id(self) -> str:
        return self._attempt.run.run_id

    @property
    def name(self) -> str:
        return self._attempt.run.name

    @property
    def version(self) -> int:
        return self._attempt.run.version

    @property
    def attempt(self) -> int:
        return self._attempt.token

    @property
    def tenant_id(self) -> str | None:
        return self._attempt.run.tenant_id

    @property
    def input(self) -> Any:
        return self._attempt.run.input

    @property
    def run(self) -> Run:
        """The run as this attempt claimed it."""
        return self._attempt.run

    @property
    def claimed_at(self) -> datetime:
        """The database's clock when this attempt was claimed."""
        return self._attempt.database_now

    @property
    def journal(self) -> dict[str, Any]:
        """A copy of the run's journal as this attempt sees it: step id -> value."""
        return dict(self._attempt.journal)

    @property
    def cancel_requested(self) -> bool:
        """A cancel was requested: the attempt ends cancelled at its next context call."""
        return self._attempt.cancel_requested

    @property
    def lease_lost(self) -> bool:
        """Another worker took the run over: this attempt may write nothing more."""
        return self._attempt.lost

    def idempotency_key(self, step_name: str, occurrence: int = 0) -> str:
        """A key for an external call made inside a step, stable across replays."""
        return f"{self.run_id}:{self.version}:{step_name}:{occurrence}"
