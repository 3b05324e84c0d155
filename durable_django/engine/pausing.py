"""Pausing a function or a queue: the pause recorded and its due runs held in one transaction, on every worker.

The store's statements hold the rule (``store/pauses.py``): a pause holds the due
runs of its function or queue, an unpause releases them in their claim order.
"""

from __future__ import annotations

from ..store import pauses as pause_store
from ..types import Pause


def pause(key: str, *, function: str | None, queue: str | None, reason: str) -> Pause:
    """Record the pause of ``key`` (a new reason replaces the old) and hold its due runs."""
    recorded, _held = pause_store.pause(key, function=function, queue=queue, reason=reason)
    return recorded


def unpause(key: str) -> bool:
    """End the pause of ``key`` and release its held runs; whether it was paused."""
    existed, _released = pause_store.unpause(key)
    return existed


def list_pauses() -> list[Pause]:
    """Every pause, oldest first."""
    return pause_store.list_pauses()
