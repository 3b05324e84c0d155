"""Streams written by real durable_worker processes, one SIGKILLed mid-stream, read by a reader that waits."""

import signal
import threading

import pytest

from durable_django import api, read_stream
from tests.helpers import sql, wait_until
from tests.workflows import effects

pytestmark = [pytest.mark.process, pytest.mark.django_db(transaction=True)]

SHORT_LEASE = {"DURABLE_TEST_LEASE_SECONDS": "2"}
WORDS = [f"word-{n}" for n in range(30)]


def items_written(run_id, key):
    [(count,)] = sql("SELECT count(*) FROM durable_stream_item WHERE run_id = %s AND key = %s", [run_id, key])
    return count


def reading(run_id, key):
    """A reader started before the run's first write, collecting (offset, value, attempt) until the stream ends."""
    seen, errors = [], []

    def read():
        try:
            seen.extend((item.offset, item.value, item.attempt) for item in read_stream(run_id, key, timeout=120))
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread, seen, errors


def test_body_writes_survive_a_sigkill_mid_stream_with_no_duplicate_and_no_gap(workers):
    run = api.enqueue("tests.stream_words", {"words": WORDS, "delay": 0.1})
    reader, seen, errors = reading(run.run_id, "tokens")
    doomed = workers.start("--concurrency", "2", **SHORT_LEASE)
    wait_until(lambda: items_written(run.run_id, "tokens") >= 8, timeout=60, message="the first words")
    doomed.send_signal(signal.SIGKILL)
    doomed.wait(timeout=10)
    written_before = items_written(run.run_id, "tokens")
    assert written_before < len(WORDS), "the kill came too late to be mid-stream"
    workers.start("--concurrency", "2", **SHORT_LEASE)
    reader.join(120)
    assert not reader.is_alive() and errors == []
    assert [value for _, value, _ in seen] == WORDS
    assert [offset for offset, _, _ in seen] == list(range(len(WORDS)))
    attempts = [attempt for _, _, attempt in seen]
    assert set(attempts[:written_before]) == {1} and set(attempts[written_before:]) == {2}
    # The reader stopped at the close; the run lands just after. The second attempt passed every write call
    # again, and wrote only those the first had not.
    wait_until(lambda: api.get_run(run.run_id).status == "succeeded", timeout=60, message="the run to finish")
    assert effects.count("body-write") >= len(WORDS) + written_before - 1


def test_writes_inside_a_step_are_made_again_when_a_sigkill_makes_the_step_run_again(workers):
    run = api.enqueue("tests.stream_words", {"words": ["w"], "inner": ["x", "y"], "inner_fails_until": 2, "hang": True})
    reader, seen, errors = reading(run.run_id, "inner")
    doomed = workers.start("--concurrency", "2", **SHORT_LEASE)
    wait_until(lambda: effects.exists("inner-hangs"), timeout=60, message="the step to write and hang")
    doomed.send_signal(signal.SIGKILL)
    doomed.wait(timeout=10)
    workers.start("--concurrency", "2", **SHORT_LEASE)
    wait_until(lambda: api.get_run(run.run_id).status == "succeeded", timeout=120, message="the run to finish")
    reader.join(60)
    assert not reader.is_alive() and errors == []
    # At least once: the killed attempt's writes stay, and the step's second run wrote them again.
    assert seen == [(0, "x", 1), (1, "y", 1), (2, "x", 2), (3, "y", 2)]
    assert [item.value for item in read_stream(run.run_id, "tokens", timeout=5)] == ["w"]
