"""An attempt's life in the worker that holds it, and how it ends: its states, their transitions, its outcomes.

An attempt is shared by its slot thread, the heartbeat, the claim loop's time
limits and the landing batcher; each moves it only along ``ALLOWED_TRANSITIONS``
(``Attempt._become``, under the attempt's lock), so two threads that race to
stop, hand over or end it cannot both win: a time limit and a returning handler,
a cancel and a completion, the claim loop and the slot thread ending it.
"""

from __future__ import annotations

import enum


class AttemptState(enum.StrEnum):
    # Claimed ahead of a free slot: the database has not started it (a slot starts it, or it is handed back).
    CLAIMED = "claimed"
    # Claimed, never started, and no longer this worker's to start (its lease went, or its run was
    # cancelled while it waited): no slot starts it.
    DROPPED = "dropped"
    # Started: a slot executes it (its handler is called, or about to be).
    RUNNING = "running"
    # A cancel was requested: the next context call outside a pivot step raises Cancelled.
    CANCELLING = "cancelling"
    # The handler returned: its completion wins over a cancel from now on; only its landing is left.
    RETURNED = "returned"
    # Handed to the worker's landing batcher, which lands it with other successes and ends it.
    LANDING = "landing"
    # The run is no longer this attempt's (taken over, its lease given up, the worker stopped past its
    # grace): it writes nothing more.
    LOST = "lost"
    # The heartbeat landed its run cancelled: it writes nothing more, and ends cancelled.
    CANCELLED = "cancelled"
    # A time limit passed while it ran: the claim loop lands and ends it; its own thread writes nothing
    # more and ends nothing.
    OVERSTAYED = "overstayed"
    # Ended by its own thread or the landing batcher: its outcome is reported (telemetry), once.
    ENDED = "ended"
    # Ended by the claim loop at a time limit: its outcome is reported, once.
    ENDED_AT_LIMIT = "ended_at_limit"


# Which state may follow which; ``Attempt._become`` refuses any other move (and a cancel once a pivot
# step is journalled).
ALLOWED_TRANSITIONS: dict[AttemptState, frozenset[AttemptState]] = {
    AttemptState.CLAIMED: frozenset(
        {
            AttemptState.RUNNING,
            AttemptState.CANCELLING,  # started with a cancel requested meanwhile
            AttemptState.DROPPED,
        }
    ),
    AttemptState.DROPPED: frozenset(),
    AttemptState.RUNNING: frozenset(
        {
            AttemptState.CANCELLING,
            AttemptState.RETURNED,
            AttemptState.LOST,
            AttemptState.CANCELLED,
            AttemptState.OVERSTAYED,
            AttemptState.ENDED,  # it ended without its handler returning: failed, suspended, cancelled
        }
    ),
    AttemptState.CANCELLING: frozenset(
        {
            AttemptState.RUNNING,  # a pivot step was journalled: the cancel is refused, the run carries on
            AttemptState.RETURNED,  # the handler returned first: its completion wins
            AttemptState.LOST,
            AttemptState.CANCELLED,
            AttemptState.OVERSTAYED,
            AttemptState.ENDED,
        }
    ),
    AttemptState.RETURNED: frozenset(
        {
            AttemptState.LANDING,
            AttemptState.LOST,  # its landing's fence refuses it, or its retries stop
            AttemptState.CANCELLED,  # the heartbeat landed the cancel it began as the handler returned
            AttemptState.ENDED,  # landed at once
        }
    ),
    AttemptState.LANDING: frozenset({AttemptState.ENDED}),
    AttemptState.LOST: frozenset(
        {
            AttemptState.CANCELLED,  # the heartbeat landed it cancelled all the same (a lease given up, not gone)
            AttemptState.OVERSTAYED,  # a handler stuck past its time limit: the claim loop ends it
            AttemptState.ENDED,
        }
    ),
    AttemptState.CANCELLED: frozenset({AttemptState.OVERSTAYED, AttemptState.ENDED}),
    AttemptState.OVERSTAYED: frozenset({AttemptState.ENDED_AT_LIMIT}),
    AttemptState.ENDED: frozenset(),
    AttemptState.ENDED_AT_LIMIT: frozenset(),
}

# The states in which the attempt writes nothing more (a context call raises LeaseLost).
WRITES_NOTHING = frozenset(
    {
        AttemptState.DROPPED,
        AttemptState.LOST,
        AttemptState.CANCELLED,
        AttemptState.OVERSTAYED,
        AttemptState.ENDED,
        AttemptState.ENDED_AT_LIMIT,
    }
)
# The states in which a stop interrupts the handler's user code with LeaseLost (a requested cancel
# interrupts it with Cancelled, outside a pivot step).
INTERRUPTED_IN = frozenset({AttemptState.LOST, AttemptState.CANCELLED, AttemptState.OVERSTAYED})


class Outcome(enum.StrEnum):
    """How an attempt ended, as the worker counts and logs it (``Attempt.end``)."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    RETRYING = "retrying"
    CANCELLED = "cancelled"
    SUSPENDED = "suspended"
    # Another worker took the run over; this attempt wrote nothing more.
    LOST = "lost"
    # The attempt ran past its function's timeout; it was failed (and is retried per the policy).
    TIMED_OUT = "timed_out"
    # The worker could not land what the attempt did; its lease expires and it is recovered.
    ERROR = "error"
