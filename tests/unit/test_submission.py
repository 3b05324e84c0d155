"""A submit's options are one typed value: every door takes the same options, checked when they are made."""

import inspect
import typing
from datetime import UTC, datetime, timedelta

import pytest

from durable_django import api
from durable_django.engine.call_options import SpawnOptions
from durable_django.exceptions import InvalidInput
from durable_django.submission import RunOptions
from durable_django.types import RetryPolicy

# What enqueue and enqueue_many take besides the run's options: its input and the keys that identify it.
_NOT_RUN_OPTIONS = {"name", "input", "inputs", "idempotency_key", "idempotency_keys", "coalesce_key", "debounce"}


def _keywords(function) -> set[str]:
    return set(inspect.signature(function).parameters) - _NOT_RUN_OPTIONS


def test_enqueue_and_enqueue_many_take_exactly_the_options_a_run_is_made_with():
    # A run option added to RunOptions.of but not to a door (or the other way round) fails here.
    made_with = _keywords(RunOptions.of) - {"retry"}  # the retry policy is the function's, or an operator's
    assert _keywords(api.enqueue) == made_with
    assert _keywords(api.enqueue_many) == made_with


def test_spawn_takes_the_run_options_but_the_tenant_which_is_its_parents():
    assert set(typing.get_type_hints(SpawnOptions)) == _keywords(RunOptions.of) - {"tenant_id"}


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"delay": 5, "available_at": datetime(2030, 1, 1, tzinfo=UTC)}, "either delay or available_at"),
        ({"delay": float("nan")}, "delay"),
        ({"available_at": datetime(2030, 1, 1)}, "available_at"),
        ({"priority": 101}, "priority"),
        ({"queue": ""}, "queue"),
        ({"version": -1}, "version"),
        ({"deadline": datetime(2000, 1, 1, tzinfo=UTC)}, "already passed"),
        ({"deadline": timedelta(0)}, "already passed"),
        ({"retry": {"max_attempts": 3}}, "RetryPolicy"),
        ({"tenant_id": "not a uuid"}, "tenant"),
    ],
)
def test_bad_options_are_refused_when_they_are_made(options, message):
    with pytest.raises(InvalidInput, match=message):
        RunOptions.of(**options)


def test_options_hold_their_stored_forms():
    options = RunOptions.of(
        tenant_id="6C1D5A02-7C3B-4C09-9C8F-0A6F3D1E2B4A",
        delay=timedelta(minutes=2),
        deadline=90,
        retry=RetryPolicy(max_attempts=2),
    )
    assert options.tenant_id == "6c1d5a02-7c3b-4c09-9c8f-0a6f3d1e2b4a"
    assert (options.delay, options.available_at) == (120.0, None)
    assert (options.deadline, options.deadline_seconds) == (None, 90.0)
    assert options.starting_after(3.5) == RunOptions.of(
        tenant_id=options.tenant_id, delay=3.5, deadline=90, retry=RetryPolicy(max_attempts=2)
    )
