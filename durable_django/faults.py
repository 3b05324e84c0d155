"""Named points in the engine where a test may act, to put a race or a crash exactly where it matters.

The engine calls ``reach(point)`` at each; with nothing injected that is one
dictionary lookup. Points: ``step.returned`` (a step's function has returned,
its value is not journalled yet); ``worker.claimed`` (a worker's claim loop has
claimed, before it asks when the next run is due); ``reconciler.pass`` (the
worker's reconciler thread is about to make a pass); ``heartbeat.renew`` (the
heartbeat is about to renew the leases it holds); ``spawn_many.inserted``
(a batch of children is inserted, their ids are not journalled yet);
``stream.read`` (a stream's reader has read what is there and is about to wait); ``bulk.acted`` (a bulk
operation's batch has acted on its runs, in its transaction, not committed); ``bulk.committed`` (that
transaction has committed, the batch's step is not journalled yet).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

_hooks: dict[str, Callable[[], None]] = {}


def reach(point: str) -> None:
    hook = _hooks.get(point)
    if hook is not None:
        hook()


@contextmanager
def injected(point: str, hook: Callable[[], None]) -> Iterator[None]:
    """Call ``hook`` each time the engine reaches ``point``, inside the block."""
    _hooks[point] = hook
    try:
        yield
    finally:
        _hooks.pop(point, None)
