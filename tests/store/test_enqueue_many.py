"""enqueue_many(): a batch of runs of one function in one statement, in the caller's transaction."""

import json
import uuid
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from durable_django import Debounce, api, enqueue_many
from durable_django.exceptions import InvalidInput, UnknownFunction
from durable_django.store.sessions import listening
from tests.helpers import sql
from tests.store.factories import claim

pytestmark = pytest.mark.django_db(transaction=True)


def count_runs():
    return sql("SELECT count(*) FROM durable_run")[0][0]


def test_ten_thousand_in_a_block_that_rolls_back_write_nothing_and_wake_nobody():
    with listening(["durable_wake"]) as listener:
        with pytest.raises(RuntimeError), transaction.atomic():
            runs = enqueue_many("tests.noop", [{"n": n} for n in range(10_000)])
            assert len(runs) == 10_000 and count_runs() == 10_000
            raise RuntimeError("roll back")
        assert count_runs() == 0
        assert list(listener.notifies(timeout=0.3)) == []


def test_ten_thousand_committed_are_one_statement_and_one_notify():
    with listening(["durable_wake"]) as listener:
        with transaction.atomic(), CaptureQueriesContext(connection) as queries:
            runs = enqueue_many("tests.noop", [{"n": n} for n in range(10_000)])
        heard = list(listener.notifies(timeout=0.5))
    assert len(queries.captured_queries) == 1, [query["sql"][:80] for query in queries.captured_queries]
    assert [(n.channel, n.payload) for n in heard] == [("durable_wake", "default")]
    assert count_runs() == 10_000
    assert [run.input for run in runs] == [{"n": n} for n in range(10_000)]
    assert len({run.run_id for run in runs}) == 10_000
    assert {run.status for run in runs} == {"pending"}


def test_runs_come_back_in_input_order_and_are_claimed_in_it():
    runs = enqueue_many("tests.noop", [{"n": n} for n in range(50)], priority=3, queue="reports")
    assert [run.input["n"] for run in runs] == list(range(50))
    assert {(run.priority, run.queue, run.name, run.version) for run in runs} == {(3, "reports", "tests.noop", 1)}
    assert [run.run_id for run in claim(limit=50)] == [run.run_id for run in runs]


def test_an_empty_batch_writes_nothing():
    with CaptureQueriesContext(connection) as queries:
        assert enqueue_many("tests.noop", []) == []
    assert queries.captured_queries == [] and count_runs() == 0


def test_idempotency_keys_join_existing_runs_and_a_repeated_key_gives_one_run():
    existing = api.enqueue("tests.noop", {"old": True}, idempotency_key="b")
    runs = enqueue_many("tests.noop", [{"i": 0}, {"i": 1}, {"i": 2}, {"i": 3}], idempotency_keys=["a", "b", "c", "a"])
    assert runs[1].run_id == existing.run_id and runs[1].input == {"old": True}
    assert runs[0].run_id == runs[3].run_id and runs[0].input == {"i": 0}
    assert [run.idempotency_key for run in runs] == ["a", "b", "c", "a"]
    assert count_runs() == 3
    again = enqueue_many("tests.noop", [{"i": 9}, {"i": 9}], idempotency_keys=["c", "a"])
    assert [run.run_id for run in again] == [runs[2].run_id, runs[0].run_id]
    assert count_runs() == 3


def test_keys_are_scoped_by_tenant():
    tenant = uuid.uuid4()
    mine = enqueue_many("tests.noop", [{}], idempotency_keys=["k"], tenant_id=tenant)
    untagged = enqueue_many("tests.noop", [{}], idempotency_keys=["k"])
    assert mine[0].run_id != untagged[0].run_id
    assert mine[0].tenant_id == str(tenant) and untagged[0].tenant_id is None
    assert enqueue_many("tests.noop", [{}], idempotency_keys=["k"], tenant_id=tenant)[0].run_id == mine[0].run_id


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: enqueue_many("tests.noop", [{}, {}], idempotency_keys=["only-one"]), "one key per input"),
        (lambda: enqueue_many("tests.noop", [{}], coalesce_key="c"), "coalesce"),
        (lambda: enqueue_many("tests.noop", [{}], debounce=Debounce("k", 1)), "debounce"),
        (lambda: enqueue_many("tests.noop", [{}, {"bad": object()}]), "input #1 is not JSON-serialisable"),
        (lambda: enqueue_many("tests.noop", [{}, {"nul": "a\x00b"}]), "NUL"),
        (lambda: enqueue_many("tests.noop", [{}, {}], idempotency_keys=["fine", "spawn:x"]), "reserved"),
        (lambda: enqueue_many("tests.noop", [{}, {}], idempotency_keys=["fine", ""]), "non-empty"),
        (lambda: enqueue_many("tests.noop", {"not": "a list"}), "list of inputs"),
        (lambda: enqueue_many("tests.noop", [{}], delay=-1), "negative"),
        (lambda: enqueue_many("tests.noop", [{}], deadline=timedelta(0)), "already passed"),
        (lambda: enqueue_many("tests.limited", [{"key": "a"}, {"key": 5}]), "Concurrency.key"),
    ],
)
def test_a_bad_value_anywhere_writes_nothing(call, message):
    with pytest.raises(InvalidInput, match=message):
        call()
    assert count_runs() == 0


def test_an_unknown_function_is_refused():
    with pytest.raises(UnknownFunction):
        enqueue_many("tests.nobody", [{}])


def test_limit_keys_are_computed_per_input():
    runs = enqueue_many("tests.limited", [{"key": "a"}, {"key": "b"}, {}])
    keys = dict(sql("SELECT run_id, concurrency_key FROM durable_run"))
    assert [keys[run.run_id] for run in runs] == ["concurrency:tests.limited:a", "concurrency:tests.limited:b", None]


def test_shared_options_apply_to_every_run():
    runs = enqueue_many("tests.noop", [{}, {}], delay=3600, deadline=timedelta(hours=2))
    assert all(run.available_at is not None and run.deadline is not None for run in runs)
    [(gap,)] = sql("SELECT min(deadline - available_at) FROM durable_run")
    assert timedelta(minutes=59) < gap < timedelta(minutes=61)
    assert claim(limit=10) == []
    stored = sql("SELECT input::text FROM durable_run")
    assert [json.loads(row[0]) for row in stored] == [{}, {}]
