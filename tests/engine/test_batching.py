"""Writes slots ask for at once, sent together (engine/batching.py): starts and steps, each fenced and decided."""

import threading

import psycopg
import pytest
from django.db import DataError, connection, connections, transaction

from durable_django import api
from durable_django.conf import durable_settings
from durable_django.engine import batching
from durable_django.exceptions import LeaseLost
from durable_django.store import claims, journal, pool
from tests.helpers import run_in_threads, subprocess_database_url
from tests.store.factories import claim, enqueue_many

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def engine_pool():
    """A worker's engine connections (one): batches are made only where slots share them."""
    with pool.installed(durable_settings.DATABASE, 1, "durable_worker test-batching") as installed:
        yield installed


def writers(table, run_ids):
    """How many transactions wrote the rows of these runs as they are now (a batch is one)."""
    with connection.cursor() as cur:
        cur.execute(f"SELECT count(DISTINCT xmin::text) FROM {table} WHERE run_id = ANY(%s)", [list(run_ids)])
        return cur.fetchone()[0]


def asked_while_a_connection_is_held(engine_pool, batcher, count, ask):
    """Call ``ask(index)`` in ``count`` threads while this thread holds the pool's only connection: the
    first thread leads a batch of its own and waits for the connection, the others wait to be sent
    together. Returns their results once the connection is given back."""
    results = [None] * count
    errors = []

    def slot(index):
        try:
            results[index] = ask(index)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)
        finally:
            connections.close_all()

    def until(condition):
        for _ in range(1000):
            with engine_pool._lock, batcher._lock:
                if condition():
                    return
            threading.Event().wait(0.01)
        pytest.fail("the slots never all asked")

    threads = [threading.Thread(target=slot, args=(index,)) for index in range(count)]
    with pool.borrowed():
        threads[0].start()
        until(lambda: len(engine_pool._waiting) == 1)  # the leader, its batch taken, waits for the connection
        for thread in threads[1:]:
            thread.start()
        until(lambda: len(batcher._asked) == count - 1)
    for thread in threads:
        thread.join(timeout=30)
    assert not errors
    return results


def started_at(run_id):
    with connection.cursor() as cur:
        cur.execute("SELECT attempt_started_at, started_at FROM durable_run WHERE run_id = %s", [run_id])
        return cur.fetchone()


def test_start_many_starts_the_held_runs_and_not_a_cancelled_one_a_started_one_or_a_stale_token():
    enqueue_many(4)
    one, two, three, four = claim(limit=4, started=0)
    claims.start(three.run_id, three.attempts)  # started already
    api.cancel(two.run_id)  # claimed, not started: a cancel ends it at once
    outcomes = claims.start_many(
        [(one.run_id, one.attempts), (two.run_id, two.attempts), (three.run_id, three.attempts), (four.run_id, 99)]
    )
    assert outcomes[(one.run_id, one.attempts)] == claims.Start(started=True, cancel_requested=False, busy=False)
    assert all(not outcome.started and not outcome.busy for key, outcome in outcomes.items() if key[0] != one.run_id)
    assert started_at(one.run_id)[0] is not None and started_at(four.run_id) == (None, None)


def test_start_many_skips_a_run_another_transaction_locked_and_says_it_is_busy():
    enqueue_many(2)
    free, locked = claim(limit=2, started=0)
    with psycopg.connect(subprocess_database_url()) as other:
        other.execute("SELECT 1 FROM durable_run WHERE run_id = %s FOR UPDATE", [locked.run_id])
        outcomes = claims.start_many([(free.run_id, free.attempts), (locked.run_id, locked.attempts)])
        assert outcomes[(locked.run_id, locked.attempts)].busy
        assert outcomes[(free.run_id, free.attempts)].started
        other.rollback()
    assert started_at(locked.run_id)[0] is None


def test_slots_asking_at_once_each_start_their_run_exactly_once(engine_pool):
    enqueue_many(24)
    runs = claim(limit=24, started=0)
    results = run_in_threads(24, lambda index: batching.start(runs[index].run_id, runs[index].attempts))
    assert results == [False] * 24  # started, no cancel requested
    assert all(started_at(run.run_id)[0] is not None for run in runs)
    # Asked again (a second start of the same attempt): not this holder's to start any more.
    assert batching.start(runs[0].run_id, runs[0].attempts) is None


def test_starts_asked_while_a_batch_is_sent_are_sent_together_in_the_next(engine_pool):
    enqueue_many(12)
    runs = claim(limit=12, started=0)
    results = asked_while_a_connection_is_held(
        engine_pool, batching._starts, 12, lambda index: batching.start(runs[index].run_id, runs[index].attempts)
    )
    assert results == [False] * 12
    assert writers("durable_run", [run.run_id for run in runs]) == 2  # the leader's own batch, then the rest


def test_outside_a_worker_a_start_is_the_threads_own_and_joins_its_transaction():
    enqueue_many(1)
    [run] = claim(limit=1, started=0)
    with transaction.atomic():
        assert batching.start(run.run_id, run.attempts) is False
        transaction.set_rollback(True)
    assert started_at(run.run_id) == (None, None)


def start_in_a_slot(run, result):
    try:
        result.append(batching.start(run.run_id, run.attempts))
    finally:
        connections.close_all()


def test_a_run_locked_by_another_transaction_is_started_once_the_lock_is_released(engine_pool):
    enqueue_many(1)
    [run] = claim(limit=1, started=0)
    result = []
    with psycopg.connect(subprocess_database_url()) as other:
        other.execute("SELECT 1 FROM durable_run WHERE run_id = %s FOR UPDATE", [run.run_id])
        slot = threading.Thread(target=start_in_a_slot, args=(run, result))
        slot.start()
        slot.join(timeout=0.5)
        assert slot.is_alive()  # waiting for the lock, on its own start
        other.rollback()
    slot.join(timeout=30)
    assert result == [False] and started_at(run.run_id)[0] is not None


def test_a_batch_the_database_refuses_raises_in_its_slot_and_the_next_batch_starts(engine_pool):
    enqueue_many(1)
    [run] = claim(limit=1, started=0)
    with pytest.raises(DataError) as refused:
        batching.start(run.run_id, 2**40)  # no fence token fits int: the statement is refused
    assert isinstance(refused.value.__cause__, psycopg.errors.NumericValueOutOfRange)
    assert batching.start(run.run_id, run.attempts) is False


def stored_steps(run_id):
    with connection.cursor() as cur:
        cur.execute("SELECT step_id, result::text FROM durable_step WHERE run_id = %s ORDER BY step_id", [run_id])
        return dict(cur.fetchall())


def test_record_steps_stores_fresh_steps_and_leaves_the_others_to_be_decided_alone():
    enqueue_many(3)
    fresh, there, locked = claim(limit=3)
    journal.record_step(there.run_id, there.attempts, "v1:s:0", '"first"', pivot=False)
    api.cancel(fresh.run_id)  # running: a cancel is requested, and carried back
    writes = [
        journal.StepWrite(fresh.run_id, fresh.attempts, "v1:s:0", '{"b": 1, "a": [1.5]}'),
        journal.StepWrite(there.run_id, there.attempts, "v1:s:0", '"second"'),  # an entry is there already
        journal.StepWrite(there.run_id, there.attempts + 1, "v1:s:1", '"stale"'),  # not this token
        journal.StepWrite(locked.run_id, locked.attempts, "v1:s:0", '"later"'),
    ]
    with psycopg.connect(subprocess_database_url()) as other:
        other.execute("SELECT 1 FROM durable_run WHERE run_id = %s FOR UPDATE", [locked.run_id])
        written = journal.record_steps(writes)
        other.rollback()
    assert written == [
        journal.StepWritten('{"a": [1.5], "b": 1}', cancel_requested=True),  # as jsonb stores it
        journal.StepWritten(None, False),
        journal.StepWritten(None, False),
        journal.StepWritten(None, False),
    ]
    assert stored_steps(there.run_id) == {"v1:s:0": '"first"'} and stored_steps(locked.run_id) == {}
    # One of them alone takes its own statement.
    assert journal.record_steps(writes[3:]) == [journal.StepWritten('"later"', cancel_requested=False)]


def test_slots_recording_steps_at_once_each_get_their_value_and_the_first_value_wins(engine_pool):
    enqueue_many(12)
    runs = claim(limit=12)
    batching.record_step(runs[0].run_id, runs[0].attempts, "v1:s:0", '"first"')

    def record(index):
        run = runs[index % 12]
        return batching.record_step(run.run_id, run.attempts, f"v1:s:{index // 12}", f'"{index}"')

    recorded = run_in_threads(24, record)
    # Run 0's first step was there: it keeps its first value; every other step is stored as sent.
    assert recorded[0] == journal.Recorded("first", False)
    assert all(recorded[index] == journal.Recorded(str(index), False) for index in range(1, 24))
    assert stored_steps(runs[1].run_id) == {"v1:s:0": '"1"', "v1:s:1": '"13"'}
    with pytest.raises(LeaseLost):
        batching.record_step(runs[1].run_id, runs[1].attempts + 1, "v1:s:2", "null")


def test_steps_asked_while_a_batch_is_sent_are_sent_together_in_the_next(engine_pool):
    enqueue_many(12)
    runs = claim(limit=12)
    recorded = asked_while_a_connection_is_held(
        engine_pool,
        batching._steps,
        12,
        lambda index: batching.record_step(runs[index].run_id, runs[index].attempts, "v1:s:0", str(index)),
    )
    assert recorded == [journal.Recorded(index, False) for index in range(12)]
    assert writers("durable_step", [run.run_id for run in runs]) == 2
