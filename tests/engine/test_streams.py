"""Events and streams in-process: body writes are durable steps, step writes at-least-once, readers in order."""

import threading
import uuid

import pytest

from durable_django import api, get_event, list_events, read_stream
from durable_django.exceptions import InvalidInput, RunNotFound
from durable_django.testing import make_due, run_until_idle
from tests.helpers import sql
from tests.workflows import effects

pytestmark = pytest.mark.django_db(transaction=True)

WORDS = ["a", "b", "c", "d"]


def values(run_id, key, **options):
    return [(item.offset, item.value, item.attempt) for item in read_stream(run_id, key, timeout=30, **options)]


def test_a_replay_writes_nothing_again_and_a_step_writes_again():
    run = api.enqueue(
        "tests.stream_words", {"words": WORDS, "inner": ["x", "y"], "inner_fails_until": 2, "fail_until": 3}
    )
    for _ in range(3):
        run_until_idle()
        make_due(run.run_id)
    run_until_idle()
    assert api.get_run(run.run_id).status == "succeeded"
    # The body wrote each word once, in attempt 1, though three attempts passed every write.
    assert values(run.run_id, "tokens") == [(n, word, 1) for n, word in enumerate(WORDS)]
    assert effects.count("body-write") == 3 * len(WORDS)
    # The step failed once after writing: its writes were made again by the attempt that ran it again.
    assert values(run.run_id, "inner") == [(0, "x", 1), (1, "y", 1), (2, "x", 2), (3, "y", 2)]
    assert effects.count("inner-step") == 2
    assert get_event(run.run_id, "status") == "done"
    assert list_events(run.run_id) == {"status": "done"}
    [(attempt,)] = sql("SELECT attempt FROM durable_event WHERE run_id = %s", [run.run_id])
    # Attempt 1 failed in the step; attempt 2 published "done" (its second body write of the key) and failed;
    # attempt 3 passed both writes without writing.
    assert attempt == 2


def test_an_async_function_writes_the_same_way():
    run = api.enqueue("tests.async_stream_words", {"words": WORDS, "fail_until": 2})
    run_until_idle()
    make_due(run.run_id)
    run_until_idle()
    assert api.get_run(run.run_id).status == "succeeded"
    assert values(run.run_id, "tokens") == [(n, word, 1) for n, word in enumerate(WORDS)]
    # Inside a step's fn (a coroutine here) each run of the step writes: the step is replayed, not run again.
    assert values(run.run_id, "inner") == [(0, 1, 1)]
    assert get_event(run.run_id, "status") == "started"


def test_bad_input_is_refused_in_the_handler_and_nothing_is_written(settings):
    settings.DURABLE = {**settings.DURABLE, "MAX_VALUE_BYTES": 1000}
    run = api.enqueue("tests.stream_bad_input", {"max_bytes": 1000})
    run_until_idle()
    done = api.get_run(run.run_id)
    assert done.status == "succeeded", done.error
    refused = done.output
    assert set(refused) == {
        "nul-key",
        "surrogate-key",
        "long-key",
        "not-json",
        "nan",
        "surrogate-value",
        "too-big",
        "after-close",
    }
    assert all(message.startswith("InvalidInput") for message in refused.values()), refused
    assert "1002 bytes of JSON, more than DURABLE['MAX_VALUE_BYTES'] (1000)" in refused["too-big"]
    assert "closed" in refused["after-close"]
    assert [item.value for item in read_stream(run.run_id, "ok", timeout=5)] == ["\U0001f600 fits"]
    assert sql("SELECT count(*) FROM durable_stream_item WHERE run_id = %s", [run.run_id]) == [(1,)]
    assert list_events(run.run_id) == {}


def test_readers_of_unknown_runs_and_other_tenants_runs_get_run_not_found_at_once():
    tenant, other = str(uuid.uuid4()), str(uuid.uuid4())
    run = api.enqueue("tests.stream_words", {"words": WORDS}, tenant_id=tenant)
    run_until_idle()
    assert values(run.run_id, "tokens", tenant_id=tenant)[-1][1] == "d"
    for call in (
        lambda: list(read_stream(run.run_id, "tokens", tenant_id=other)),
        lambda: list(read_stream(str(uuid.uuid4()), "tokens")),
        lambda: get_event(run.run_id, "status", tenant_id=other),
        lambda: get_event(str(uuid.uuid4()), "status"),
        lambda: list_events(run.run_id, tenant_id=other),
    ):
        with pytest.raises(RunNotFound):
            call()
    assert get_event(run.run_id, "status", tenant_id=tenant) == "done"
    [(stored_tenant,)] = sql("SELECT DISTINCT tenant_id::text FROM durable_stream_item WHERE run_id = %s", [run.run_id])
    assert stored_tenant == tenant
    with pytest.raises(InvalidInput):
        read_stream(run.run_id, "x" * 513)
    with pytest.raises(InvalidInput):
        read_stream(run.run_id, "tokens", after=-2)


def test_a_reader_waits_for_items_and_get_event_for_its_value():
    run = api.enqueue("tests.stream_until_signal", {"words": ["one", "two"]})
    run_until_idle()
    assert api.get_run(run.run_id).status == "waiting"
    seen, answers = [], []
    reader = threading.Thread(
        target=lambda: seen.extend(item.value for item in read_stream(run.run_id, "tokens", timeout=60))
    )
    waiter = threading.Thread(target=lambda: answers.append(get_event(run.run_id, "answer", timeout=60)))
    reader.start()
    waiter.start()
    assert get_event(run.run_id, "answer", timeout=0.2, default="none yet") == "none yet"
    with pytest.raises(TimeoutError):
        list(read_stream(run.run_id, "tokens", timeout=0.3))
    api.emit_signal(run.run_id, "go", 42)
    run_until_idle()
    reader.join(60)
    waiter.join(60)
    # The stream was never closed: its reader stopped because the run finished.
    assert seen == ["one", "two", "after-signal"] and answers == [42]
    # A finished run that never published a key gives the default at once, whatever the timeout.
    assert get_event(run.run_id, "never", default="gone") == "gone"


def test_purge_removes_events_and_streams_with_their_run():
    run = api.enqueue("tests.stream_words", {"words": WORDS})
    run_until_idle()
    kept = api.enqueue("tests.stream_words", {"words": ["kept"]})
    run_until_idle()
    tables = ("durable_event", "durable_stream", "durable_stream_item")
    assert all(sql(f"SELECT count(*) FROM {table} WHERE run_id = %s", [run.run_id]) != [(0,)] for table in tables)
    sql("UPDATE durable_run SET updated_at = now() - interval '2 days' WHERE run_id = %s", [run.run_id])
    assert api.purge_finished(older_than=86400) == 1
    assert all(sql(f"SELECT count(*) FROM {table} WHERE run_id = %s", [run.run_id]) == [(0,)] for table in tables)
    assert [item.value for item in read_stream(kept.run_id, "tokens", timeout=5)] == ["kept"]
