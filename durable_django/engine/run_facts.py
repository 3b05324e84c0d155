"""What both contexts share: the attempt's read-only facts, and the options their calls take.

``RunFacts`` is what a handler (and a plug-in running one, such as the Django
Tasks runtime) may read of its attempt without reaching into the engine.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, TypedDict

from ..types import RetryPolicy, Run
from .attempt import Attempt


class SpawnOptions(TypedDict, total=False):
    """What ``spawn()`` passes on to the child's submit; the keys that identify the child are spawn's own."""

    delay: timedelta | float | None
    available_at: datetime | None
    version: int | None
    queue: str
    priority: int
    retry: RetryPolicy | None
    deadline: datetime | timedelta | float | None


class AsyncSpawnOptions(SpawnOptions, total=False):
    occurrence: int


class SignalWaitOptions(TypedDict, total=False):
    occurrence: int
    signal_occurrence: int
    timeout: timedelta | float | None
    default: object


class ResultWaitOptions(TypedDict, total=False):
    occurrence: int
    timeout: timedelta | float | None


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
