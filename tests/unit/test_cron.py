"""Cron next-fire arithmetic, DST rules included: pure, no database."""

from datetime import UTC, datetime, timedelta

import pytest

from durable_django.engine.cron import next_fire_after, normalize, parse
from durable_django.exceptions import InvalidInput, InvalidSchedule

UTC = UTC


def ticks(expression, tz, start, count):
    spec = parse(expression, tz)
    out, at = [], start
    for _ in range(count):
        at = next_fire_after(spec, at)
        out.append(at)
    return out


def utc(*args):
    return datetime(*args, tzinfo=UTC)


def test_next_tick_is_strictly_after_the_instant():
    spec = parse("*/15 * * * *")
    assert next_fire_after(spec, utc(2025, 1, 1, 10, 0)) == utc(2025, 1, 1, 10, 15)
    assert next_fire_after(spec, utc(2025, 1, 1, 10, 0, 0, 1)) == utc(2025, 1, 1, 10, 15)
    assert next_fire_after(spec, utc(2025, 1, 1, 10, 14, 59)) == utc(2025, 1, 1, 10, 15)


def test_a_zone_shifts_the_tick_and_the_answer_is_utc():
    [tick] = ticks("0 9 * * *", "Asia/Tokyo", utc(2025, 1, 1, 0, 30), 1)
    assert tick == utc(2025, 1, 2, 0, 0) and tick.tzinfo == UTC


def test_a_daily_tick_follows_local_time_across_spring_forward():
    # Europe/Berlin skips 02:00-03:00 on 2025-03-30: 09:00 local stays 09:00 local.
    out = ticks("0 9 * * *", "Europe/Berlin", utc(2025, 3, 28, 12), 3)
    assert out == [utc(2025, 3, 29, 8), utc(2025, 3, 30, 7), utc(2025, 3, 31, 7)]


def test_a_skipped_wall_time_fires_once_shifted_by_the_gap():
    out = ticks("30 2 * * *", "Europe/Berlin", utc(2025, 3, 29, 12), 2)
    # 02:30 does not exist on 2025-03-30: it fires at 03:30 CEST (01:30 UTC), then 02:30 CEST again.
    assert out == [utc(2025, 3, 30, 1, 30), utc(2025, 3, 31, 0, 30)]


def test_an_hourly_schedule_keeps_its_rhythm_through_the_gap_without_firing_twice():
    out = ticks("30 * * * *", "Europe/Berlin", utc(2025, 3, 29, 23, 45), 4)
    assert out == [utc(2025, 3, 30, 0, 30), utc(2025, 3, 30, 1, 30), utc(2025, 3, 30, 2, 30), utc(2025, 3, 30, 3, 30)]


def test_a_repeated_wall_time_fires_once_at_its_first_pass():
    # Clocks go back 03:00 CEST -> 02:00 CET on 2025-10-26: 02:30 happens twice.
    out = ticks("30 2 * * *", "Europe/Berlin", utc(2025, 10, 25, 12), 2)
    assert out == [utc(2025, 10, 26, 0, 30), utc(2025, 10, 27, 1, 30)]


def test_an_every_hour_schedule_fires_in_both_passes_of_the_repeated_hour():
    out = ticks("*/30 * * * *", "Europe/Berlin", utc(2025, 10, 25, 23, 45), 6)
    assert out == [
        utc(2025, 10, 26, 0, 0),
        utc(2025, 10, 26, 0, 30),
        utc(2025, 10, 26, 1, 0),
        utc(2025, 10, 26, 1, 30),
        utc(2025, 10, 26, 2, 0),
        utc(2025, 10, 26, 2, 30),
    ]
    # Asked from inside the second pass, it continues there rather than going back.
    spec = parse("*/30 * * * *", "Europe/Berlin")
    assert next_fire_after(spec, utc(2025, 10, 26, 1, 10)) == utc(2025, 10, 26, 1, 30)


def test_a_specific_hour_schedule_asked_from_the_second_pass_waits_for_tomorrow():
    spec = parse("45 2 * * *", "Europe/Berlin")
    # 01:10 UTC is 02:10 CET, the second pass; 02:45 fired at its first pass (00:45 UTC).
    assert next_fire_after(spec, utc(2025, 10, 26, 1, 10)) == utc(2025, 10, 27, 1, 45)


def test_new_york_dst_both_ways():
    spring = ticks("0 1,2,3 * * *", "America/New_York", utc(2025, 3, 9, 5, 30), 3)
    # 02:00 EST does not exist on 2025-03-09; shifted to 03:00 EDT, which is also a tick: fires once.
    assert spring == [utc(2025, 3, 9, 6), utc(2025, 3, 9, 7), utc(2025, 3, 10, 5)]
    autumn = ticks("0 1 * * *", "America/New_York", utc(2025, 11, 1, 12), 2)
    assert autumn == [utc(2025, 11, 2, 5), utc(2025, 11, 3, 6)]


def test_six_fields_put_seconds_first():
    assert ticks("*/20 * * * * *", "UTC", utc(2025, 1, 1, 0, 0, 5), 3) == [
        utc(2025, 1, 1, 0, 0, 20),
        utc(2025, 1, 1, 0, 0, 40),
        utc(2025, 1, 1, 0, 1, 0),
    ]


def test_aliases_and_whitespace():
    assert ticks("@daily", "UTC", utc(2025, 1, 1, 5), 1) == [utc(2025, 1, 2)]
    assert normalize("  0   3 * *\t* ") == "0 3 * * *"


@pytest.mark.parametrize(
    "expression", ["", "   ", "61 * * * *", "* * *", "0 0 * * * * *", "0 0 30 2 *", "every day", None, 5, "H * * * *"]
)
def test_invalid_expressions_raise_invalid_schedule(expression):
    with pytest.raises(InvalidSchedule):
        parse(expression)


@pytest.mark.parametrize(
    "tz",
    [
        "Mars/Olympus",
        "",
        None,
        "../etc/passwd",
        "../etc",
        3,
        # Folders of the zoneinfo tree: opening one is an IsADirectoryError, not a missing zone.
        "Europe",
        "America",
        "Etc",
        "Europe/Berlin\x00",
        "\x00",
        pytest.param("x" * 10_000, id="long-name"),
        pytest.param("Europe/" * 2_000, id="long-path"),
    ],
)
def test_invalid_zones_raise_invalid_schedule(tz):
    with pytest.raises(InvalidSchedule) as info:
        parse("* * * * *", tz)
    assert isinstance(info.value, InvalidInput)
    assert len(str(info.value)) < 200  # an absurd name does not flood the log


def test_naive_instant_is_refused():
    with pytest.raises(ValueError):
        next_fire_after(parse("* * * * *"), datetime(2025, 1, 1))


def test_next_fire_is_fast_enough_for_a_per_second_schedule_near_a_transition():
    spec = parse("* * * * * *", "Europe/Berlin")
    at = utc(2025, 10, 26, 0, 59, 59)
    assert next_fire_after(spec, at) == at + timedelta(seconds=1)
    assert next_fire_after(spec, utc(2025, 10, 26, 1, 0, 0)) == utc(2025, 10, 26, 1, 0, 1)
