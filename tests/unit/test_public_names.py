"""The public surface: every name in ``__all__`` resolves, and the documented paths keep working."""

import importlib

import pytest

import durable_django


@pytest.mark.parametrize("name", durable_django.__all__)
def test_every_public_name_resolves(name):
    assert getattr(durable_django, name) is not None


def test_the_wave_2_names_are_public():
    assert {"Concurrency", "RateLimit", "Debounce", "enqueue_many"} <= set(durable_django.__all__)
    from durable_django.exceptions import AttemptTimedOut, DeadlineExceeded, DurableError

    assert issubclass(AttemptTimedOut, DurableError) and issubclass(DeadlineExceeded, DurableError)


def test_the_events_and_streams_names_are_public():
    assert {"get_event", "list_events", "read_stream", "aread_stream", "StreamItem"} <= set(durable_django.__all__)
    from durable_django.streams import stream_response

    assert callable(stream_response)


def test_the_wave_3_attempt_names_are_public():
    assert {"list_attempts", "AttemptRecord"} <= set(durable_django.__all__)
    from durable_django.types import AttemptRecord

    assert durable_django.AttemptRecord is AttemptRecord


def test_the_operator_control_names_are_public():
    assert {"pause", "unpause", "list_pauses", "Pause", "fork"} <= set(durable_django.__all__)


def test_backfill_is_public():
    from durable_django.api.schedules import backfill

    assert "backfill" in durable_django.__all__ and durable_django.backfill is backfill


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        durable_django.nothing_here


@pytest.mark.parametrize(
    "path, names",
    [
        ("durable_django.tasks", ["DurableBackend", "DurableTask"]),
        (
            "durable_django.api",
            [
                "enqueue",
                "enqueue_many",
                "get_run",
                "cancel",
                "emit_signal",
                "resume",
                "wait_for_result",
                "list_runs",
                "list_attempts",
                "purge_finished",
                "schedule",
                "unschedule",
                "retry_as_new_run",
                "get_event",
                "list_events",
                "read_stream",
                "aread_stream",
                "pause",
                "unpause",
                "list_pauses",
            ],
        ),
        ("durable_django.testing", ["run_until_idle", "ensure_database_url"]),
        (
            "durable_django.exceptions",
            [
                "DurableError",
                "UnknownFunction",
                "InvalidInput",
                "InvalidSchedule",
                "RunNotFound",
                "NotAChild",
                "AttemptTimedOut",
                "DeadlineExceeded",
            ],
        ),
    ],
)
def test_documented_module_paths_keep_their_names(path, names):
    module = importlib.import_module(path)
    assert all(hasattr(module, name) for name in names)
