import json
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from django.db import transaction

from durable_django import api
from durable_django.exceptions import InvalidInput, UnknownFunction
from durable_django.store.sessions import listening
from tests.helpers import run_in_threads, sql
from tests.store.factories import claim

pytestmark = pytest.mark.django_db(transaction=True)


def count_runs():
    return sql("SELECT count(*) FROM durable_run")[0][0]


def test_twenty_threads_submitting_one_key_get_one_run():
    runs = run_in_threads(20, lambda i: api.enqueue("tests.noop", {"n": i}, idempotency_key="order-42"))
    assert len({run.run_id for run in runs}) == 1
    assert count_runs() == 1
    assert all(run.idempotency_key == "order-42" for run in runs)
    stored_input = sql("SELECT input::text FROM durable_run")[0][0]
    assert json.loads(stored_input) == runs[0].input


def test_a_later_submit_returns_the_original_run_unchanged():
    first = api.enqueue("tests.noop", {"a": 1}, idempotency_key="k", priority=5)
    again = api.enqueue("tests.noop", {"a": 2}, idempotency_key="k", priority=-5, delay=60)
    assert again.run_id == first.run_id
    assert again.input == {"a": 1} and again.priority == 5 and again.available_at is None


def test_rollback_leaves_no_row_and_wakes_no_listener():
    with listening(["durable_wake"]) as listener:
        with pytest.raises(RuntimeError), transaction.atomic():
            api.enqueue("tests.noop", {})
            raise RuntimeError("roll back")
        assert count_runs() == 0
        assert list(listener.notifies(timeout=0.3)) == []
        with transaction.atomic():
            for _ in range(10):
                api.enqueue("tests.noop", {})
        heard = list(listener.notifies(timeout=0.5))
    assert count_runs() == 10
    assert [(n.channel, n.payload) for n in heard] == [("durable_wake", "default")]


def test_coalescing_burst_joins_one_run_until_it_is_claimed():
    burst = run_in_threads(10, lambda i: api.enqueue("tests.noop", {"i": i}, coalesce_key="refresh"))
    assert len({run.run_id for run in burst}) == 1
    claimed = claim(limit=5)
    assert [run.run_id for run in claimed] == [burst[0].run_id]
    later = api.enqueue("tests.noop", {}, coalesce_key="refresh")
    assert later.run_id != burst[0].run_id
    assert api.enqueue("tests.noop", {}, coalesce_key="refresh").run_id == later.run_id


def test_one_key_in_two_tenants_gives_two_runs_and_no_cross_tenant_read():
    tenant_a, tenant_b = uuid.uuid4(), uuid.uuid4()
    run_a = api.enqueue("tests.noop", {}, idempotency_key="k", tenant_id=tenant_a)
    run_b = api.enqueue("tests.noop", {}, idempotency_key="k", tenant_id=tenant_b)
    untagged = api.enqueue("tests.noop", {}, idempotency_key="k")
    assert len({run_a.run_id, run_b.run_id, untagged.run_id}) == 3
    assert sorted(r[0] for r in sql("SELECT idempotency_key FROM durable_run")) == sorted(
        [f"{tenant_a}:k", f"{tenant_b}:k", ":k"]
    )
    assert run_a.idempotency_key == "k" and run_a.tenant_id == str(tenant_a)
    assert api.get_run(run_a.run_id, tenant_id=tenant_b) is None
    assert api.get_run(run_a.run_id, tenant_id=tenant_a).run_id == run_a.run_id
    assert api.get_run(run_a.run_id).run_id == run_a.run_id  # the operator's unscoped view
    assert [r.run_id for r in api.list_runs(tenant_id=tenant_b).items] == [run_b.run_id]


def test_delay_and_available_at_set_when_a_run_becomes_claimable():
    delayed = api.enqueue("tests.noop", {}, delay=timedelta(minutes=5))
    at = datetime.fromisoformat("2099-01-01T00:00:00+00:00")
    scheduled = api.enqueue("tests.noop", {}, available_at=at)
    assert delayed.available_at > delayed.created_at + timedelta(minutes=4)
    assert scheduled.available_at == at


def test_an_idempotency_key_is_never_lost_to_coalescing():
    """Keys that could not both be kept are refused, so one key never names two runs."""
    with pytest.raises(InvalidInput, match="either idempotency_key or coalesce_key"):
        api.enqueue("tests.noop", {}, idempotency_key="K", coalesce_key="C")
    first = api.enqueue("tests.noop", {}, idempotency_key="K")
    claim()
    assert api.enqueue("tests.noop", {}, idempotency_key="K").run_id == first.run_id
    assert count_runs() == 1


def test_a_spawned_childs_key_cannot_be_taken_by_an_ordinary_submit():
    from durable_django.testing import run_until_idle

    parent = api.enqueue("tests.parent", {"child": {"wait_signal": True}})
    run_until_idle()
    child_key = sql("SELECT idempotency_key FROM durable_run WHERE parent_run_id = %s", [parent.run_id])[0][0]
    with pytest.raises(InvalidInput, match="reserved"):
        api.enqueue("tests.noop", {}, idempotency_key=child_key.split(":", 1)[1])
    assert count_runs() == 2


def test_json_null_input_and_output_are_stored_as_json_null():
    run = api.enqueue("tests.noop", None)
    assert sql("SELECT input IS NULL, jsonb_typeof(input) FROM durable_run WHERE run_id = %s", [run.run_id]) == [
        (False, "null")
    ]


@pytest.mark.parametrize(
    "call, error",
    [
        (lambda: api.enqueue("tests.nobody", {}), UnknownFunction),
        (lambda: api.enqueue("tests.noop", {"x": object()}), InvalidInput),
        (lambda: api.enqueue("tests.noop", {"x": float("nan")}), InvalidInput),
        (lambda: api.enqueue("tests.noop", {}, available_at=datetime(2030, 1, 1)), InvalidInput),
        (lambda: api.enqueue("tests.noop", {}, delay=-1), InvalidInput),
        (lambda: api.enqueue("tests.noop", {}, delay="soon"), InvalidInput),
        (lambda: api.enqueue("tests.noop", {}, tenant_id="acme"), InvalidInput),
        (lambda: api.enqueue("tests.noop", {}, priority=1000), InvalidInput),
        (lambda: api.enqueue("tests.noop", {}, idempotency_key=""), InvalidInput),
        (lambda: api.list_runs(cursor="not-a-cursor"), InvalidInput),
        (lambda: api.get_run("x", tenant_id="not-a-uuid"), InvalidInput),
        (lambda: api.enqueue("tests.noop", {}, delay=float("inf")), InvalidInput),
        (lambda: api.enqueue("tests.noop", {}, delay=float("nan")), InvalidInput),
        (lambda: api.enqueue("tests.noop", {}, delay=1e300), InvalidInput),
        (lambda: api.enqueue("tests.noop", {}, delay=timedelta.max), InvalidInput),
        (lambda: api.enqueue("tests.noop", {}, delay=10**400), InvalidInput),
        (lambda: api.enqueue("tests.noop", {}, idempotency_key="k", coalesce_key="c"), InvalidInput),
        (lambda: api.enqueue("tests.noop", {}, idempotency_key="spawn:run:v1:child:0"), InvalidInput),
        (lambda: api.enqueue("tests.noop", {}, coalesce_key="schedule:nightly:2030-01-01"), InvalidInput),
        (lambda: api.enqueue("tests.noop", {}, version=0), InvalidInput),
        (lambda: api.enqueue("tests.noop", {}, version=True), InvalidInput),
        (lambda: api.purge_finished(older_than=float("inf")), InvalidInput),
        (lambda: api.purge_finished(older_than=timedelta.max), InvalidInput),
    ],
)
def test_bad_input_raises_a_typed_error_and_writes_nothing(call, error):
    with pytest.raises(error):
        call()
    assert count_runs() == 0


def test_each_submit_snapshots_default_retry_as_it_is_set_then(settings):
    base = dict(settings.DURABLE["DEFAULT_RETRY"])
    assert api.enqueue("tests.noop").retry_policy.max_attempts == base["max_attempts"]
    settings.DURABLE = {**settings.DURABLE, "DEFAULT_RETRY": {**base, "max_attempts": 7}}
    assert api.enqueue("tests.noop").retry_policy.max_attempts == 7
    # Equal to 7 but not a whole number of type int: refused, though a valid 7 was seen before.
    settings.DURABLE = {**settings.DURABLE, "DEFAULT_RETRY": {**base, "max_attempts": 7.0}}
    with pytest.raises(InvalidInput):
        api.enqueue("tests.noop")
    assert count_runs() == 2


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"delay": 60, "priority": 5, "queue": "q"},
        {"idempotency_key": "order-1", "tenant_id": "7C9E6679-7425-40DE-944B-E07FC1F90AE7"},
        {"coalesce_key": "sync", "available_at": datetime(2031, 5, 1, 12, 0, tzinfo=UTC)},
        {"deadline": timedelta(hours=1)},
    ],
)
def test_the_run_enqueue_returns_is_the_run_as_stored(options):
    run = api.enqueue("tests.noop", {"b": [1, 2.5, "x"], "a": None, "é": "ü"}, **options)
    assert run == api.get_run(run.run_id, tenant_id=options.get("tenant_id"))
