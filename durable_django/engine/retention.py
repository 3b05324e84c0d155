"""Retention: deleting whole finished trees that landed before a cutoff, in bounded batches."""

from __future__ import annotations

from datetime import datetime

from ..store import purge as purge_store


def purge(cutoff: datetime, batch_size: int) -> int:
    """Delete every whole finished tree that landed before ``cutoff``, oldest first; returns the runs deleted."""
    deleted, position = 0, None
    while True:
        count, position = purge_store.purge_batch(cutoff, batch_size, position)
        deleted += count
        if position is None:
            return deleted


def purge_unless_another_worker_is(cutoff: datetime, batch_size: int) -> int | None:
    """The worker's periodic purge, one worker at a time; None when another worker's purge holds the turn.

    The turn is taken by each batch inside its own transaction (nothing is held
    between batches, so it works through a transaction pooler): a purge that
    finds the turn taken stops, leaving the rest to the worker that holds it.
    """
    deleted, position = 0, None
    while True:
        batch = purge_store.purge_batch_in_turn(cutoff, batch_size, position)
        if batch is None:
            return deleted if position is not None else None
        count, position = batch
        deleted += count
        if position is None:
            return deleted
