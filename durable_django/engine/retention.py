"""Retention: deleting whole finished trees that landed before a cutoff, in bounded batches."""

from __future__ import annotations

from datetime import datetime

from ..store import purge as purge_store
from ..store import schedules as schedule_store


def purge(cutoff: datetime, batch_size: int) -> int:
    """Delete every whole finished tree that landed before ``cutoff``, oldest first; returns the runs deleted."""
    deleted, position = 0, None
    while True:
        count, position = purge_store.purge_batch(cutoff, batch_size, position)
        deleted += count
        if position is None:
            return deleted


def purge_unless_another_worker_is(cutoff: datetime, batch_size: int) -> int | None:
    """The worker's periodic purge: one worker at a time; None when another holds the turn."""
    if not schedule_store.try_purge_lock():
        return None
    try:
        return purge(cutoff, batch_size)
    finally:
        schedule_store.release_purge_lock()
