"""Starting claimed runs that waited for slots: together when slots ask at once, each exactly once, fenced."""

import threading

import psycopg
import pytest
from django.db import DataError, connection, connections

from durable_django import api
from durable_django.engine.starts import Starts
from durable_django.store import claims
from tests.helpers import run_in_threads, subprocess_database_url
from tests.store.factories import claim, enqueue_many

pytestmark = pytest.mark.django_db(transaction=True)


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


def test_slots_asking_at_once_each_start_their_run_exactly_once():
    enqueue_many(24)
    runs = claim(limit=24, started=0)
    starts = Starts()
    results = run_in_threads(24, lambda index: starts.start(runs[index].run_id, runs[index].attempts))
    assert results == [False] * 24  # started, no cancel requested
    assert all(started_at(run.run_id)[0] is not None for run in runs)
    # Asked again (a second start of the same attempt): not this holder's to start any more.
    assert starts.start(runs[0].run_id, runs[0].attempts) is None


def start_in_a_slot(starts, run, result):
    try:
        result.append(starts.start(run.run_id, run.attempts))
    finally:
        connections.close_all()


def test_a_run_locked_by_another_transaction_is_started_once_the_lock_is_released():
    enqueue_many(1)
    [run] = claim(limit=1, started=0)
    starts = Starts()
    result = []
    with psycopg.connect(subprocess_database_url()) as other:
        other.execute("SELECT 1 FROM durable_run WHERE run_id = %s FOR UPDATE", [run.run_id])
        slot = threading.Thread(target=start_in_a_slot, args=(starts, run, result))
        slot.start()
        slot.join(timeout=0.5)
        assert slot.is_alive()  # waiting for the lock, on its own start
        other.rollback()
    slot.join(timeout=30)
    assert result == [False] and started_at(run.run_id)[0] is not None


def test_a_batch_the_database_refuses_raises_in_its_slot_and_the_next_batch_starts():
    enqueue_many(1)
    [run] = claim(limit=1, started=0)
    starts = Starts()
    with pytest.raises(DataError) as refused:
        starts.start(run.run_id, 2**40)  # no fence token fits int: the statement is refused
    assert isinstance(refused.value.__cause__, psycopg.errors.NumericValueOutOfRange)
    assert starts.start(run.run_id, run.attempts) is False
