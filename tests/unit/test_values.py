"""Pure tests: retry math, registry rules, tenancy, durations and command argument types."""

import argparse
import json
import random
import uuid
from datetime import datetime, timedelta

import pytest

from durable_django.exceptions import DuplicateRegistration, InvalidInput
from durable_django.journal_ids import StepId
from durable_django.management.arguments import duration, name_list, non_negative_int, port, positive_int, tenant
from durable_django.registry import Registry
from durable_django.storable import instant, json_text, seconds
from durable_django.store.db import from_json
from durable_django.tenancy import normalize_tenant, scope, unscope
from durable_django.types import RetryPolicy


def test_retry_delay_grows_by_backoff_and_caps_at_max_delay_without_jitter():
    policy = RetryPolicy(initial_delay=1.0, backoff=2.0, max_delay=5.0, jitter=0.0)
    assert [policy.delay_before_retry(n) for n in range(1, 6)] == [1.0, 2.0, 4.0, 5.0, 5.0]


def test_full_jitter_draws_between_zero_and_the_base_delay():
    policy = RetryPolicy(initial_delay=8.0, backoff=1.0, jitter=1.0)
    draws = [policy.delay_before_retry(1, random.Random(seed)) for seed in range(200)]
    assert all(0 <= d <= 8.0 for d in draws) and max(draws) - min(draws) > 4


def test_half_jitter_keeps_half_the_delay():
    policy = RetryPolicy(initial_delay=10.0, backoff=1.0, jitter=0.5)
    assert all(5.0 <= policy.delay_before_retry(1, random.Random(s)) <= 10.0 for s in range(100))


@pytest.mark.parametrize("kwargs", [{"max_attempts": 0}, {"backoff": 0.5}, {"jitter": 1.5}, {"initial_delay": -1}])
def test_invalid_retry_policies_are_refused(kwargs):
    with pytest.raises(InvalidInput):
        RetryPolicy(**kwargs)


def test_registering_one_name_and_version_twice_with_another_callable_is_an_error():
    registry = Registry()

    def first(ctx, input):
        return 1

    registry.register("a.b", 1, first, None)
    registry.register("a.b", 1, first, None)  # a re-import registers the same origin again

    def other(ctx, input):
        return 2

    other.__qualname__ = "elsewhere"
    with pytest.raises(DuplicateRegistration):
        registry.register("a.b", 1, other, None)
    registry.register("a.b", 2, other, None)
    assert registry.newest("a.b").version == 2 and registry.pairs() == [("a.b", 1), ("a.b", 2)]


def test_tenant_scoping_round_trips_keys():
    tenant_id = normalize_tenant(uuid.UUID(int=7))
    assert scope("order:1", tenant_id) == f"{tenant_id}:order:1"
    assert unscope(scope("order:1", tenant_id)) == "order:1"
    assert scope("k", None) == ":k" and unscope(":k") == "k"
    with pytest.raises(InvalidInput):
        normalize_tenant("acme")


def test_durations_and_datetimes_are_validated():
    assert seconds(timedelta(minutes=2), what="d") == 120.0 and seconds(3, what="d") == 3.0
    for bad in (-1, "5", True, float("nan")):
        with pytest.raises(InvalidInput):
            seconds(bad, what="d")
    with pytest.raises(InvalidInput):
        instant(datetime(2030, 1, 1), what="when")


def test_command_argument_types():
    assert duration("30d") == timedelta(days=30) and duration("90m") == timedelta(minutes=90)
    assert duration("45") == timedelta(seconds=45)
    assert name_list("a, b,") == ["a", "b"] and positive_int("3") == 3
    assert non_negative_int("0") == 0 and non_negative_int("4") == 4
    assert tenant(str(uuid.UUID(int=1))) == str(uuid.UUID(int=1))
    assert port("9100") == 9100 and port("65535") == 65535
    for parse, text in (
        (duration, "soon"),
        (positive_int, "0"),
        (non_negative_int, "-1"),
        (non_negative_int, "x"),
        (tenant, "acme"),
        (name_list, ","),
        (port, "0"),
        (port, "65536"),
        (port, "http"),
    ):
        with pytest.raises(argparse.ArgumentTypeError):
            parse(text)


def test_a_timeout_must_be_a_positive_duration():
    registry = Registry()
    assert registry.register("t.ok", 1, lambda ctx, input: None, None, timeout=timedelta(seconds=2)).timeout == 2.0
    assert registry.timeout_of("t.ok", 1) == 2.0 and registry.timeout_of("t.ok", 2) is None
    for bad in (0, -1, "soon", float("inf")):
        with pytest.raises(InvalidInput):
            registry.register("t.bad", 1, lambda ctx, input: None, None, timeout=bad)


def test_system_checks_report_invalid_declared_schedules_and_purge_after(settings):
    from durable_django.checks import check_settings

    assert check_settings() == []
    settings.DURABLE = {
        **settings.DURABLE,
        "PURGE_AFTER": "30 days",
        "SCHEDULES": {
            "ok": {"name": "tests.noop", "cron": "0 * * * *"},
            "bad-cron": {"name": "tests.noop", "cron": "every hour"},
            "nobody": {"name": "tests.nobody", "cron": "0 * * * *"},
            None: {"name": "tests.noop", "cron": "0 * * * *"},  # an id that is no id
        },
    }
    errors = {(error.id, error.msg.split(" is invalid")[0]) for error in check_settings()}
    assert errors == {
        ("durable_django.E007", "DURABLE['SCHEDULES'] entry 'bad-cron'"),
        ("durable_django.E007", "DURABLE['SCHEDULES'] entry 'nobody'"),
        ("durable_django.E007", "DURABLE['SCHEDULES'] entry None"),
        (
            "durable_django.E008",
            "DURABLE['PURGE_AFTER'] must be a timedelta or a number of seconds, got '30 days' (a "
            "timedelta, a number of seconds, or None).",
        ),
    }


@pytest.mark.parametrize("value", [0, -1, 2.5, "4", True, None])
def test_a_system_check_refuses_engine_connections_that_are_not_a_positive_integer(settings, value):
    from durable_django.checks import check_settings

    settings.DURABLE = {**settings.DURABLE, "ENGINE_CONNECTIONS": value}
    assert [error.id for error in check_settings()] == ["durable_django.E030"]
    settings.DURABLE = {**settings.DURABLE, "ENGINE_CONNECTIONS": 1}
    assert check_settings() == []


def test_a_retry_policys_json_holds_every_field():
    import dataclasses

    from durable_django.types import RetryPolicy

    policy = RetryPolicy(max_attempts=5, initial_delay=0.5, max_delay=9.0, backoff=3.0, jitter=0.25)
    # The default on_exhausted is left out, so the policies stored before parking existed read the same.
    fields = dataclasses.asdict(policy)
    assert policy.as_json() == {key: value for key, value in fields.items() if key != "on_exhausted"}
    assert RetryPolicy.from_json(policy.as_json()) == policy
    parking = dataclasses.replace(policy, on_exhausted="park")
    assert parking.as_json() == dataclasses.asdict(parking)
    assert RetryPolicy.from_json(parking.as_json()) == parking


def test_batch_run_ids_are_distinct_version_4_uuids():
    from durable_django.store.inserts import new_run_ids

    ids = new_run_ids(2000)
    assert len(set(ids)) == 2000 and new_run_ids(0) == []
    parsed = [uuid.UUID(run_id) for run_id in ids]
    assert {u.version for u in parsed} == {4} and {u.variant for u in parsed} == {uuid.RFC_4122}
    assert [str(u) for u in parsed] == ids


def test_system_check_refuses_a_metrics_address_that_is_not_text(settings):
    from durable_django.checks import check_settings

    settings.DURABLE = {**settings.DURABLE, "METRICS_ADDRESS": "127.0.0.1"}
    assert check_settings() == []
    settings.DURABLE = {**settings.DURABLE, "METRICS_ADDRESS": ("127.0.0.1", 9100)}
    assert [error.id for error in check_settings()] == ["durable_django.E020"]


@pytest.mark.parametrize("value", [None, True, False, 0, -7, 10**40, "x", 1.5, [1, None], {"a": True, "b": "\u00e9"}])
def test_json_text_writes_what_the_json_encoder_writes_and_from_json_reads_it_back(value):
    encoded = json_text(value, what="a value")
    assert encoded == json.dumps(value, separators=(",", ":"), allow_nan=False, ensure_ascii=False)
    assert from_json(encoded) == value


def test_an_int_past_pythons_digit_limit_is_invalid_input_not_a_crash():
    with pytest.raises(InvalidInput, match="not JSON-serialisable"):
        json_text(10**5000, what="a value")


@pytest.mark.parametrize("name, occurrence", [("fetch", 0), ("a:b", 12), ("é", 3)])
def test_a_step_id_encoded_directly_is_the_records_text(name, occurrence):
    assert StepId.encode(4, name, occurrence) == str(StepId.of(4, name, occurrence))
    assert StepId.parse(StepId.encode(4, name, occurrence)) == StepId(4, name, occurrence)


@pytest.mark.parametrize("name, occurrence", [("", 0), (None, 0), ("a\x00", 0), ("a", -1), ("a", True), ("a", 1.0)])
def test_a_step_id_encoded_directly_refuses_what_of_refuses(name, occurrence):
    with pytest.raises(InvalidInput):
        StepId.encode(1, name, occurrence)
