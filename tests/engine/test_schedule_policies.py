"""Schedule policies on the real database: overlap, catch-up window, jitter, pause on failure, backfill."""

import threading
from datetime import UTC, datetime, timedelta

import pytest

from durable_django import backfill, schedule
from durable_django.api.schedules import get_schedule, schedule_runs, set_schedule_enabled
from durable_django.engine.cron import next_fire_after, parse
from durable_django.engine.schedules import fire_due, settle_ended_runs, tick_key
from durable_django.exceptions import InvalidInput, InvalidSchedule
from durable_django.registry import registry
from durable_django.testing import run_until_idle
from durable_django.worker.loop import WorkerOptions
from durable_django.worker.scheduler import SchedulerThread
from tests.helpers import run_in_threads, sql

pytestmark = pytest.mark.django_db(transaction=True)

NAMES = registry.names()
HOURLY = parse("0 * * * *")


def db_now():
    return sql("SELECT now()")[0][0]


def set_next_fire(stored_id, at):
    sql("UPDATE durable_schedule SET next_fire_at = %s WHERE schedule_id = %s", [at, stored_id])


def runs_of(schedule_id):
    """(tick, status, available_at) of each run a schedule's ticks made, in tick order."""
    rows = sql(
        "SELECT idempotency_key, status, available_at FROM durable_run WHERE idempotency_key LIKE %s",
        [f":schedule:{schedule_id}:%"],
    )
    ticks = [(datetime.fromisoformat(key.split(":", 3)[3]), status, at) for key, status, at in rows]
    return sorted(ticks)


def hour_ago(hours):
    """A whole hour ``hours`` before now (an hourly schedule's tick)."""
    return (db_now() - timedelta(hours=hours)).replace(minute=0, second=0, microsecond=0)


# -- bad values ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "options",
    [
        {"overlap": "buffer_all"},
        {"overlap": None},
        {"catchup_window": -1},
        {"catchup_window": float("nan")},
        {"catchup_window": "1h"},
        {"jitter": float("inf")},
        {"jitter": timedelta(days=-1)},
        {"pause_on_failure": "yes"},
    ],
)
def test_bad_policy_values_are_refused_and_nothing_is_written(options):
    with pytest.raises(InvalidInput):
        schedule("bad", "tests.noop", "0 * * * *", **options)
    assert sql("SELECT count(*) FROM durable_schedule")[0][0] == 0


def test_policies_are_stored_and_read_back():
    stored = schedule(
        "p",
        "tests.noop",
        "0 * * * *",
        overlap="skip",
        catchup_window=3600,
        jitter=timedelta(seconds=30),
        pause_on_failure=True,
    )
    assert (stored.overlap, stored.catchup_window, stored.jitter, stored.pause_on_failure) == (
        "skip",
        timedelta(hours=1),
        timedelta(seconds=30),
        True,
    )
    assert get_schedule("p") == stored


# -- overlap --------------------------------------------------------------------------------------------


def fire_at(stored_id, tick):
    set_next_fire(stored_id, tick)
    return fire_due(names=NAMES, tenant_id=None)


def test_allow_all_fires_every_tick_while_the_previous_run_is_live():
    schedule("all", "tests.noop", "0 * * * *")
    fire_at(":all", hour_ago(3))
    fire_at(":all", hour_ago(2))
    assert [status for _, status, _ in runs_of("all")] == ["pending", "pending"]


def test_skip_makes_no_run_while_the_previous_is_live_and_fires_again_once_it_ended():
    schedule("s", "tests.noop", "0 * * * *", overlap="skip")
    first, second, third = hour_ago(3), hour_ago(2), hour_ago(1)
    fire_at(":s", first)
    [fired] = fire_at(":s", second)
    assert fired.run is None and [t.action for t in fired.ticks] == ["skipped"]
    run_until_idle()
    fire_at(":s", third)
    assert [(tick, status) for tick, status, _ in runs_of("s")] == [(first, "succeeded"), (third, "pending")]


def test_buffer_one_keeps_one_tick_and_fires_it_when_the_live_run_ends():
    schedule("b", "tests.noop", "0 * * * *", overlap="buffer_one")
    first, second, third = hour_ago(4), hour_ago(3), hour_ago(2)
    fire_at(":b", first)
    fire_at(":b", second)
    fire_at(":b", third)  # skipped: the second is buffered already
    assert get_schedule("b").buffered_tick == second
    assert [tick for tick, _, _ in runs_of("b")] == [first]
    assert fire_due(names=NAMES, tenant_id=None) == []  # still live: the buffered tick is not due
    run_until_idle()
    [fired] = fire_due(names=NAMES, tenant_id=None)
    assert [(t.tick, t.action) for t in fired.ticks] == [(second, "fired")]
    assert [tick for tick, _, _ in runs_of("b")] == [first, second]
    assert get_schedule("b").buffered_tick is None


def test_cancel_previous_cancels_the_live_run_and_starts_the_new_one():
    schedule("c", "tests.noop", "0 * * * *", overlap="cancel_previous")
    first, second = hour_ago(3), hour_ago(2)
    fire_at(":c", first)
    fire_at(":c", second)
    assert [(tick, status) for tick, status, _ in runs_of("c")] == [(first, "cancelled"), (second, "pending")]


# -- catch-up window and jitter ---------------------------------------------------------------------------


def test_a_catchup_window_fires_each_missed_tick_within_it_oldest_first_and_skips_older_ones():
    window = timedelta(hours=3, minutes=30)
    schedule("w", "tests.noop", "0 * * * *", catchup_window=window)
    before = db_now()
    fire_at(":w", hour_ago(6))
    ticks = [tick for tick, _, _ in runs_of("w")]
    # Three or four ticks fall inside 3 h 30 min, by the minute of the hour it runs at: the whole hours
    # from the newest one back to the oldest no older than the window before the fire.
    newest = before.replace(minute=0, second=0, microsecond=0)
    within = [newest - timedelta(hours=back) for back in range(6, -1, -1)]
    assert ticks == [tick for tick in within if tick >= before - window]
    assert len(ticks) in (3, 4)
    assert get_schedule("w").next_fire_at == next_fire_after(HOURLY, db_now())
    # Firing again fires nothing twice.
    set_next_fire(":w", hour_ago(2))
    fire_due(names=NAMES, tenant_id=None)
    assert [tick for tick, _, _ in runs_of("w")] == ticks


def test_without_a_window_downtime_owes_one_fire():
    schedule("n", "tests.noop", "0 * * * *")
    fire_at(":n", hour_ago(6))
    assert [tick for tick, _, _ in runs_of("n")] == [hour_ago(6)]


def test_jitter_makes_the_run_due_within_it_after_the_tick_and_the_tick_keys_it():
    schedule("j", "tests.noop", "0 * * * *", jitter=timedelta(minutes=20))
    ticks = [hour_ago(h) for h in range(8, 0, -1)]
    for tick in ticks:
        fire_at(":j", tick)
    fired = runs_of("j")
    assert [tick for tick, _, _ in fired] == ticks
    offsets = [at - tick for tick, _, at in fired]
    assert all(timedelta(0) <= offset <= timedelta(minutes=20) for offset in offsets)
    assert len(set(offsets)) > 1  # random, not a fixed delay


# -- pause on failure -----------------------------------------------------------------------------------


def test_a_failed_run_pauses_a_schedule_that_asks_and_enabling_it_clears_the_reason():
    schedule("f", "tests.always_fails", "0 * * * *", pause_on_failure=True)
    schedule("g", "tests.always_fails", "0 * * * *")
    fire_at(":f", hour_ago(2))
    fire_at(":g", hour_ago(2))
    [failed] = [
        row[0] for row in sql("SELECT run_id FROM durable_run WHERE idempotency_key LIKE %s", [":schedule:f:%"])
    ]
    for _ in range(3):
        run_until_idle()
        sql("UPDATE durable_run SET available_at = now() WHERE status = 'pending'")
    assert sql("SELECT status FROM durable_run WHERE run_id = %s", [failed])[0][0] == "failed"
    paused = settle_ended_runs()
    assert [stored for stored, _ in paused] == [":f"]
    current = get_schedule("f")
    assert not current.enabled and failed in current.paused_reason and "KeyError" in current.paused_reason
    assert get_schedule("g").enabled  # it did not ask to pause
    assert settle_ended_runs() == []  # each failure is noted once
    assert set_schedule_enabled("f", True).paused_reason is None
    assert settle_ended_runs() == [] and get_schedule("f").enabled


# -- backfill --------------------------------------------------------------------------------------------


def test_backfill_fires_each_tick_in_the_range_once():
    schedule("bf", "tests.noop", "0 * * * *")
    start, end = hour_ago(5), hour_ago(1)
    made = backfill("bf", start, end)
    assert [run.idempotency_key for run in made] == [tick_key("bf", hour_ago(h)) for h in (5, 4, 3, 2)]
    # A wider backfill makes only the tick no one fired yet.
    again = backfill("bf", start - timedelta(hours=1), end)
    assert [run.idempotency_key for run in again] == [tick_key("bf", hour_ago(6))]
    assert len(runs_of("bf")) == 5
    assert [r.run_id for r in schedule_runs("bf", limit=2)] == [again[0].run_id, made[3].run_id]


@pytest.mark.parametrize(
    "start, end",
    [
        (datetime(2024, 1, 1), datetime(2024, 1, 2, tzinfo=UTC)),
        (datetime(2024, 1, 2, tzinfo=UTC), datetime(2024, 1, 1, tzinfo=UTC)),
        (datetime(2024, 1, 1, tzinfo=UTC), datetime(2999, 1, 1, tzinfo=UTC)),
        (datetime(1960, 1, 1, tzinfo=UTC), datetime(1961, 1, 1, tzinfo=UTC)),
        (datetime(2020, 1, 1, tzinfo=UTC), datetime(2024, 1, 1, tzinfo=UTC)),  # too many hourly ticks
        ("2024-01-01", datetime(2024, 1, 2, tzinfo=UTC)),
    ],
)
def test_bad_backfill_ranges_are_refused_and_nothing_is_written(start, end):
    schedule("bf", "tests.noop", "0 * * * *")
    with pytest.raises(InvalidInput):
        backfill("bf", start, end)
    assert sql("SELECT count(*) FROM durable_run")[0][0] == 0


def test_backfill_of_an_unknown_schedule_is_invalid_input():
    with pytest.raises(InvalidInput, match="no schedule"):
        backfill("nope", hour_ago(3), hour_ago(1))


def test_backfill_follows_the_overlap_policy():
    schedule("bs", "tests.noop", "0 * * * *", overlap="skip")
    made = backfill("bs", hour_ago(5), hour_ago(1))
    assert [run.idempotency_key for run in made] == [tick_key("bs", hour_ago(5))]


@pytest.mark.parametrize("overlap", ["allow_all", "skip", "buffer_one", "cancel_previous"])
def test_two_backfills_and_two_schedulers_racing_fire_each_tick_once(overlap):
    minutely = "* * * * *"
    schedule("race", "tests.noop", minutely, catchup_window=timedelta(hours=2), overlap=overlap)
    now = db_now().replace(second=0, microsecond=0)
    start, end = now - timedelta(minutes=90), now - timedelta(minutes=1)
    set_next_fire(":race", start)
    halt = threading.Event()
    schedulers = [SchedulerThread(WorkerOptions(), halt) for _ in range(2)]
    for thread in schedulers:
        thread.start()
    try:
        made = run_in_threads(4, lambda index: backfill("race", start, end))
    finally:
        halt.set()
        for thread in schedulers:
            thread.join(timeout=30)
    made_ids = [run.run_id for batch in made for run in batch]
    assert len(made_ids) == len(set(made_ids))  # no run was made twice by two backfills
    ticks = [tick for tick, _, _ in runs_of("race")]
    assert len(ticks) == len(set(ticks))  # each tick has one run
    if overlap in ("allow_all", "cancel_previous"):  # every tick of the range fired, by a backfill or a scheduler
        assert set(expected := [start + timedelta(minutes=m) for m in range(89)]) <= set(ticks), expected
    else:  # the first run stays pending (no worker runs it), so every later tick was skipped or buffered
        assert len(ticks) == 1
    if overlap == "cancel_previous":  # each tick's run cancelled the one before: one run is left live
        statuses = [status for _, status, _ in runs_of("race")]
        assert statuses.count("pending") == 1 and set(statuses) == {"pending", "cancelled"}


def test_an_invalid_schedule_stays_invalid_with_policies():
    with pytest.raises(InvalidSchedule):
        schedule("x", "tests.noop", "not a cron", overlap="skip")


def test_a_catchup_window_across_a_dst_change_fires_each_wall_tick_once():
    # Hourly at :30 in New York through the 2024 spring-forward: 02:30 does not exist and is 03:30 EDT.
    schedule("dst", "tests.noop", "30 * * * *", tz="America/New_York", catchup_window=timedelta(days=365 * 50))
    set_next_fire(":dst", datetime(2024, 3, 10, 5, 30, tzinfo=UTC))  # 00:30 EST
    [fired] = fire_due(names=NAMES, tenant_id=None)
    ticks = [tick.tick for tick in fired.ticks][:4]
    zone = parse("* * * * *", "America/New_York").zone
    assert [tick.astimezone(zone).strftime("%H:%M %Z") for tick in ticks] == [
        "00:30 EST", "01:30 EST", "03:30 EDT", "04:30 EDT",
    ]  # fmt: skip
    assert len(fired.ticks) == 100  # a pass fires at most 100; the rest are still owed, oldest first
    spec = parse("30 * * * *", "America/New_York")
    assert get_schedule("dst").next_fire_at == next_fire_after(spec, fired.ticks[-1].tick)


def test_purging_a_schedules_run_removes_its_record():
    from durable_django.api import purge_finished

    schedule("pg", "tests.noop", "0 * * * *")
    fire_at(":pg", hour_ago(2))
    run_until_idle()
    assert [record.status for record in schedule_runs("pg")] == ["succeeded"]
    assert purge_finished(older_than=0) == 1
    assert schedule_runs("pg") == []
