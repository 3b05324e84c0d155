"""Real durable_worker processes with their schedulers: the skip overlap policy and the catch-up window."""

import itertools
import signal
from datetime import datetime, timedelta

import pytest

from durable_django import schedule
from durable_django.engine.cron import next_fire_after, parse
from durable_django.testing import advance_schedule
from tests.helpers import sql, wait_until

pytestmark = [pytest.mark.process, pytest.mark.long, pytest.mark.django_db(transaction=True)]

CRON = "*/5 * * * * *"
SPEC = parse(CRON)
INTERVAL = timedelta(seconds=5)


def fired(name):
    """(tick, status, created_at, finished_at) of every run the schedule made, in tick order."""
    rows = sql(
        "SELECT idempotency_key, status, created_at, finished_at FROM durable_run WHERE name = %s",
        [name],
    )
    return sorted((datetime.fromisoformat(key.split(":", 3)[3]), *rest) for key, *rest in rows)


def stop(workers, procs):
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    for proc in procs:
        assert proc.wait(timeout=60) == 0, workers.output(proc)


def test_skip_never_lets_two_runs_of_the_schedule_overlap(workers):
    # Each run takes longer than a tick: under "skip" the ticks that find it live make no run.
    schedule("slow-5s", "tests.slow", CRON, input={"seconds": 7}, overlap="skip")
    procs = [workers.start("--concurrency", "2") for _ in range(2)]
    wait_until(
        lambda: sum(status == "succeeded" for _, status, _, _ in fired("tests.slow")) >= 2,
        timeout=120,
        message="two runs of the schedule finished",
    )
    stop(workers, procs)
    runs = fired("tests.slow")
    for (tick, _, _, finished), (later_tick, _, created, _) in itertools.pairwise(runs):
        assert finished is not None and created >= finished, runs  # made only once the previous ended
        assert later_tick - tick >= 2 * INTERVAL, runs  # the tick in between was skipped


def test_after_downtime_a_catchup_window_fires_every_missed_tick_oldest_first(workers):
    schedule("every-5s", "tests.noop", CRON, input="tick", catchup_window=timedelta(minutes=1))
    # Three intervals and a second pass with no scheduler: three ticks are missed.
    owed = advance_schedule("every-5s", 3 * INTERVAL + timedelta(seconds=1)).next_fire_at
    worker = workers.start("--concurrency", "1")
    wait_until(lambda: len(fired("tests.noop")) >= 5, timeout=60, message="catch-up and more ticks")
    stop(workers, [worker])
    ticks = [tick for tick, *_ in fired("tests.noop")]
    # The owed tick, then every cron tick after it, each once: none of the missed ones is dropped
    # (without a window the first tick after the owed one would be the first after the restart).
    assert ticks[0] == owed
    assert ticks[1] == next_fire_after(SPEC, owed)
    assert all(later == next_fire_after(SPEC, earlier) for earlier, later in itertools.pairwise(ticks[1:])), ticks
