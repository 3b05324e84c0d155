"""An attempt ends once, whoever ends it: a time limit that ends an attempt while its handler returns, lands
or hands its success over leaves exactly one attempt record, one report and one count, and they agree.

The worker's own parts race here, in real threads: a slot thread (``SlotRunner``) executes the attempt
while this thread plays the claim loop, landing handed-over successes and ending overstays as it does.
"""

import random
import threading
import time

import pytest

from durable_django import api
from durable_django.engine import lifecycle, telemetry
from durable_django.worker.landings import PendingLandings
from durable_django.worker.slot_runner import SlotRunner
from durable_django.worker.slots import SlotPool
from durable_django.worker.stats import Stats
from durable_django.worker.time_limits import TimeLimitKeeper
from tests.helpers import sql

pytestmark = pytest.mark.django_db(transaction=True)

ROUNDS = 48
BOUNDS = lifecycle.claim_bounds(functions=None, queues=None, tenant_id=None)


class Reports:
    """An observer that keeps every attempt_ended it is told of: (run id, token, outcome)."""

    def __init__(self):
        self.ended = []
        self._lock = threading.Lock()

    def attempt_started(self, attempt):
        pass

    def step_executed(self, attempt):
        pass

    def attempt_ended(self, attempt, outcome, seconds):
        with self._lock:
            self.ended.append((attempt.run.run_id, attempt.token, outcome))


@pytest.fixture
def reports():
    observer = Reports()
    telemetry.observe(observer)
    yield observer
    telemetry.stop_observing(observer)


def one_round(seed, reports):
    """Execute one attempt of a three-step run under a timeout that ends within its few milliseconds, or
    after; returns (run id, token, what the worker counted)."""
    rng = random.Random(seed)
    pool, stats = SlotPool(1), Stats()
    landings = PendingLandings(pool, stats, on_database=lambda reachable: None, wake=lambda: None)
    keeper = TimeLimitKeeper(pool, stats, replace_slot=lambda: 1)
    slots = SlotRunner(
        pool, stats, landings, wake=lambda: None, database_reachable=lambda: True, on_database=lambda up: None
    )
    api.enqueue("tests.many_steps", {"steps": 3, "round": seed})
    [attempt] = lifecycle.claim(limit=1, start_now=1, worker_id="race", bounds=BOUNDS)
    attempt.timeout = rng.choice([0.0, 0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 1.0])
    pool.add([attempt])
    slot = threading.Thread(target=slots.run, args=(0,))
    slot.start()
    try:
        while pool.held_count:  # the claim loop's turn, over and over: land, then keep the time limits
            landings.land()
            keeper.end_overstays()
            time.sleep(0)  # let the slot thread run, as the claim loop does while it waits
    finally:
        pool.close()
        slot.join(timeout=30)
    assert not slot.is_alive()
    return attempt.run.run_id, attempt.token, stats.outcomes


def test_a_time_limit_and_a_returning_handler_end_an_attempt_once(reports):
    ended_by = {"time limit": 0, "its own thread": 0}
    for seed in range(ROUNDS):
        run_id, token, counted = one_round(seed, reports)
        records = sql("SELECT outcome FROM durable_attempt WHERE run_id = %s AND number = %s", [run_id, token])
        reported = [outcome for rid, number, outcome in reports.ended if (rid, number) == (run_id, token)]
        assert len(records) == 1, (seed, records)
        assert len(reported) == 1, (seed, reported)
        [(record,)] = records
        assert reported == [record] and record in ("succeeded", "timed_out"), (seed, record, reported)
        assert counted == {record: 1}, (seed, counted)
        ended_by["time limit" if record == "timed_out" else "its own thread"] += 1
    # Both sides won some rounds: the race was run, not one order every round.
    assert all(ended_by.values()), ended_by
