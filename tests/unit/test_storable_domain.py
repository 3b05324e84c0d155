"""The storable domain's rules, one by one, and its limits as named constants."""

import json
import sys
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given

from durable_django.exceptions import InvalidInput
from durable_django.storable import (
    DEFAULT_MAX_VALUE_BYTES,
    MAX_JSON_DEPTH,
    MAX_NAME_CHARS,
    PG_INTEGER_MAX,
    PG_INTEGER_MIN,
    count,
    instant,
    integer,
    json_text,
    json_value,
    name,
    number,
    seconds,
    storable_text,
    too_deep,
    zone,
)
from tests import strategies as S


def test_the_limits_are_the_contracts():
    assert (MAX_NAME_CHARS, MAX_JSON_DEPTH, DEFAULT_MAX_VALUE_BYTES) == (512, 512, 64 * 2**20)
    assert (PG_INTEGER_MIN, PG_INTEGER_MAX) == (-(2**31), 2**31 - 1)


@pytest.mark.parametrize(
    ("text", "stored"),
    [("plain", "plain"), ("a\x00b", "a\ufffdb"), ("file-\udcff.txt", "file-\ufffd.txt"), ("😀\ud800", "😀\ufffd")],
)
def test_storable_text_replaces_each_nul_and_lone_surrogate(text, stored):
    assert storable_text(text) == stored
    stored.encode("utf-8")  # what PostgreSQL receives


@S.fuzz(100)
@given(S.texts)
def test_storable_text_always_gives_text_postgresql_stores(text):
    result = storable_text(text)
    assert "\x00" not in result and len(result) == len(text)
    result.encode("utf-8")


def test_names_are_non_empty_storable_and_at_most_512_characters():
    assert name("é" * MAX_NAME_CHARS, what="n") == "é" * MAX_NAME_CHARS
    for bad in ("", "x" * (MAX_NAME_CHARS + 1), "a\x00", "a\udcff", None, 5, b"bytes"):
        with pytest.raises(InvalidInput):
            name(bad, what="n")


def test_integers_default_to_postgresqls_integer_and_counts_start_at_one():
    assert integer(PG_INTEGER_MAX, what="i") == PG_INTEGER_MAX and integer(PG_INTEGER_MIN, what="i") == PG_INTEGER_MIN
    for bad in (PG_INTEGER_MAX + 1, PG_INTEGER_MIN - 1, 10**400, True, 1.0, "1"):
        with pytest.raises(InvalidInput):
            integer(bad, what="i")
    with pytest.raises(InvalidInput):
        count(0, what="c")


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf"), 10**400, True, "1.5", None])
def test_numbers_are_finite(bad):
    with pytest.raises(InvalidInput):
        number(bad, what="f", minimum=0)


def test_a_nan_fails_even_a_sign_check():
    with pytest.raises(InvalidInput):
        seconds(float("nan"), what="s", positive=True)
    assert seconds(timedelta(hours=1), what="s", positive=True) == 3600.0


def test_instants_are_aware_from_1970_to_a_hundred_years_ahead():
    now = datetime(2026, 6, 1, tzinfo=UTC)
    assert instant(datetime(1970, 1, 1, tzinfo=UTC), what="t", now=now)
    assert instant(now + timedelta(days=36_000), what="t", now=now)
    for bad in (
        datetime(2026, 1, 1),
        datetime(1969, 12, 31, 23, 59, tzinfo=UTC),
        datetime(9999, 12, 31, 23, 59, tzinfo=timezone(timedelta(hours=-5))),  # past year 9999 in UTC
        datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=5))),  # before year 1 in UTC
        now + timedelta(days=36_700),
        "2026-01-01",
    ):
        with pytest.raises(InvalidInput):
            instant(bad, what="t", now=now)


@pytest.mark.parametrize("tz", ["localtime", "posixrules", "Europe", "", None, "../etc/passwd", "UTC\x00"])
def test_zones_are_iana_names(tz):
    with pytest.raises(InvalidInput, match="unknown time zone"):
        zone(tz)
    assert zone("America/New_York") == "America/New_York"


def nested(depth):
    value = 0
    for _ in range(depth):
        value = [value]
    return value


def test_json_no_deeper_than_512_levels_checked_without_recursion():
    assert json_text(nested(MAX_JSON_DEPTH), what="v")
    old = sys.getrecursionlimit()
    for depth in (MAX_JSON_DEPTH + 1, 100_000):
        with pytest.raises(InvalidInput, match="deeper than 512"):
            json_text(nested(depth), what="v")
    assert sys.getrecursionlimit() == old
    assert not too_deep('{"a":"' + "[" * 1000 + '"}')  # brackets inside a string are text
    with pytest.raises(InvalidInput, match="deeper than 512"):
        json_value("[" * 100_000 + "]" * 100_000, what="typed")


@pytest.mark.parametrize("bad", [{"k\udcff": 1}, ["\udcff"], {"a": "\x00"}, {"\x00": 1}, float("nan"), [float("inf")]])
def test_json_refuses_nul_lone_surrogates_and_nan_in_any_string_or_key(bad):
    with pytest.raises(InvalidInput):
        json_text(bad, what="v")


def test_json_at_most_max_value_bytes(settings):
    settings.DURABLE = {**settings.DURABLE, "MAX_VALUE_BYTES": 10}
    assert json_text("é" * 4, what="v") == '"éééé"'  # 10 bytes of UTF-8
    with pytest.raises(InvalidInput, match="11 bytes"):
        json_text("é" * 4 + "x", what="v")


@S.fuzz(60)
@given(S.anything)
def test_json_text_either_refuses_or_writes_what_json_reads_back(value):
    try:
        encoded = json_text(value, what="v")
    except InvalidInput:
        return
    encoded.encode("utf-8")
    assert "\\u0000" not in encoded and not too_deep(encoded)
    assert json.loads(encoded) == json.loads(json.dumps(value))
