"""The options a context's calls take, typed once for the sync and the async context alike."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TypedDict

from ..types import RetryPolicy


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
