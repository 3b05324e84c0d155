"""An attempt's life: every move along ALLOWED_TRANSITIONS and no other, and one end per attempt."""

from datetime import UTC, datetime

import pytest

from durable_django.engine import telemetry
from durable_django.engine.attempt import Attempt
from durable_django.engine.attempt_state import ALLOWED_TRANSITIONS, AttemptState, Outcome
from durable_django.exceptions import Cancelled, LeaseLost
from durable_django.states import RunStatus
from durable_django.types import ClaimedRun, Run

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def attempt(*, started=True, cancel_requested=False, pivoted=False):
    run = Run(
        run_id="run-1",
        name="tests.noop",
        version=1,
        status=RunStatus.RUNNING,
        input={},
        output=None,
        error=None,
        attempts=1,
        tenant_id=None,
        idempotency_key=None,
        coalesce_key=None,
        parent_run_id=None,
        queue="default",
        priority=0,
        available_at=None,
        leased_until=None,
        created_at=NOW,
        updated_at=NOW,
        cancel_requested_at=NOW if cancel_requested else None,
        cancel_refused_at=None,
        pivoted_at=NOW if pivoted else None,
    )
    return Attempt(ClaimedRun(run=run, token=1, journal={}, recovered=False), NOW, started=started)


class Reports:
    """An observer that keeps every attempt_ended it is told of."""

    def __init__(self):
        self.ended = []

    def attempt_started(self, attempt):
        pass

    def step_executed(self, attempt):
        pass

    def attempt_ended(self, attempt, outcome, seconds):
        self.ended.append((attempt, outcome))


@pytest.fixture
def reports():
    observer = Reports()
    telemetry.observe(observer)
    yield observer
    telemetry.stop_observing(observer)


@pytest.mark.parametrize("source", list(AttemptState))
def test_every_state_moves_only_to_the_states_the_table_allows(source):
    assert set(ALLOWED_TRANSITIONS) == set(AttemptState)
    for target in AttemptState:
        held = attempt()
        held._state = source
        with held._lock:
            moved = held._become(target)
        assert moved == (target in ALLOWED_TRANSITIONS[source]), (source, target)
        assert held.state is (target if moved else source)


def test_an_ended_attempt_has_no_way_out_and_a_dropped_one_never_starts():
    for terminal in (AttemptState.ENDED, AttemptState.ENDED_AT_LIMIT, AttemptState.DROPPED):
        assert ALLOWED_TRANSITIONS[terminal] == frozenset()
    claimed = attempt(started=False)
    claimed.stop(lost=True)  # the heartbeat found its lease gone while it waited for a slot
    assert claimed.state is AttemptState.DROPPED and not claimed.started
    assert claimed.mark_started(cancel_requested=False) is False


def test_a_completion_wins_over_a_later_cancel_and_time_limit():
    held = attempt()
    held.finish()
    assert held.begin_cancel() is False
    held.request_cancel()
    assert held.overstay() is False
    assert held.state is AttemptState.RETURNED and not held.cancel_requested and not held.overstayed


def test_a_cancel_is_refused_once_a_pivot_step_is_journalled():
    held = attempt(cancel_requested=True)
    assert held.state is AttemptState.CANCELLING
    with pytest.raises(Cancelled):
        held.check()
    held.mark_pivoted()  # the answer of the pivot step's journal write came back with the cancel
    held.request_cancel()
    assert held.state is AttemptState.RUNNING and not held.cancel_requested
    held.check()
    assert held.begin_cancel() is False


def test_an_attempt_ends_once_and_a_time_limit_takes_its_end_from_its_thread(reports):
    ended_once = attempt()
    assert ended_once.end(Outcome.SUCCEEDED) is True
    assert ended_once.end(Outcome.ERROR) is False
    stopped = attempt()
    assert stopped.overstay() is True
    with pytest.raises(LeaseLost):
        stopped.check()  # its thread writes nothing more
    assert stopped.end(Outcome.LOST) is False  # its own thread, coming back from the handler
    assert stopped.end(Outcome.TIMED_OUT, at_limit=True) is True  # the claim loop
    assert stopped.end(Outcome.TIMED_OUT, at_limit=True) is False
    assert stopped.overstayed and stopped.lost
    assert reports.ended == [(ended_once, "succeeded"), (stopped, "timed_out")]
