"""Pausing a function or a queue: an operator's brake on new attempts, on every worker.

A pause holds the due runs of its function or queue (``Run.held_by`` is
``"paused:function:{name}"`` or ``"paused:queue:{queue}"``): they stay pending,
use nothing of their limits' budgets, and start in their claim order once
unpaused. Running attempts finish; schedules keep firing into a paused queue.
Pauses are tenant-blind.
"""

from __future__ import annotations

from ..engine import pausing
from ..exceptions import InvalidInput
from ..storable import text
from ..types import Pause, pause_key


def check_target(function: str | None, queue: str | None) -> str:
    """The pause key of exactly one of a function and a queue.

    Raises:
        InvalidInput: neither or both, or a name that is empty or holds a NUL character.
    """
    if (function is None) == (queue is None):
        raise InvalidInput("name exactly one of function= and queue=")
    if function is not None:
        text(function, what="function")
    else:
        text(queue, what="queue")
    return pause_key(function=function, queue=queue)


def pause(*, function: str | None = None, queue: str | None = None, reason: str = "") -> Pause:
    """Pause a function or a queue (exactly one): no worker starts a new attempt of it until unpaused.

    Pausing what is paused already keeps the pause and takes the new reason.

    Raises:
        InvalidInput: neither or both of function and queue, an empty name, or a reason that is not text.
    """
    key = check_target(function, queue)
    if not isinstance(reason, str) or "\x00" in reason:
        raise InvalidInput(f"reason must be a string without NUL characters, got {reason!r}")
    return pausing.pause(key, function=function, queue=queue, reason=reason)


def unpause(*, function: str | None = None, queue: str | None = None) -> bool:
    """End the pause of a function or a queue; its held runs go back to be claimed in their order.

    Returns:
        Whether it was paused.

    Raises:
        InvalidInput: neither or both of function and queue.
    """
    return pausing.unpause(check_target(function, queue))


def list_pauses() -> list[Pause]:
    """Every pause, oldest first."""
    return pausing.list_pauses()
