import threading
from datetime import timedelta

import pytest

from durable_django import api
from durable_django.store import claims, landing, leases
from durable_django.testing import make_due
from tests.helpers import run_in_threads, sql
from tests.store.factories import claim, complete, enqueue_many, fail

pytestmark = pytest.mark.django_db(transaction=True)


def test_two_claimers_racing_over_100_pending_runs_never_claim_one_twice():
    runs = enqueue_many(100)

    def claimer(index):
        mine = []
        while True:
            batch = claim(limit=7, worker_id=f"w{index}")
            if not batch:
                return mine
            mine.extend(run.run_id for run in batch)

    first, second = run_in_threads(2, claimer)
    assert not set(first) & set(second)
    assert sorted(first + second) == sorted(run.run_id for run in runs)
    assert sql("SELECT DISTINCT attempts, status FROM durable_run") == [(1, "running")]


def test_claim_orders_by_priority_then_age_and_honours_filters():
    low = api.enqueue("tests.noop", {}, priority=-5)
    old = api.enqueue("tests.noop", {})
    new = api.enqueue("tests.noop", {})
    urgent = api.enqueue("tests.noop", {}, priority=10)
    other_queue = api.enqueue("tests.noop", {}, queue="reports", priority=50)
    future = api.enqueue("tests.noop", {}, delay=3600, priority=90)
    order = [run.run_id for run in claim(limit=10, queues=["default"])]
    assert order == [urgent.run_id, old.run_id, new.run_id, low.run_id]
    assert [run.run_id for run in claim(queues=["reports"])] == [other_queue.run_id]
    assert claim() == []
    assert api.get_run(future.run_id).status == "pending"


def test_a_worker_claims_only_pairs_it_has():
    from durable_django.registry import registry

    run = api.enqueue("tests.versioned", {}, version=1)
    registration = registry.get("tests.versioned", 1)
    registry.unregister("tests.versioned", 1)
    try:
        assert claim() == []
        assert api.get_run(run.run_id).attempts == 0
    finally:
        registry.register("tests.versioned", 1, registration.fn, registration.retry)
    assert [r.run_id for r in claim()] == [run.run_id]


def test_an_expired_lease_is_reclaimed_with_attempts_advanced():
    run = api.enqueue("tests.noop", {})
    [first] = claim(worker_id="dead")
    assert claim() == []  # still leased
    make_due(run.run_id)  # the lease expires
    [second] = claim(worker_id="alive")
    assert second.run_id == run.run_id
    assert (first.attempts, second.attempts) == (1, 2)
    assert second.recoveries == 1 and second.failures == 0
    assert second.worker_id == "alive"


def test_a_stale_token_cannot_complete_fail_or_heartbeat_a_reclaimed_run():
    api.enqueue("tests.noop", {})
    [stale] = claim()
    make_due(stale.run_id)  # its lease expires
    [fresh] = claim()
    assert complete(stale, '"stale"') is None
    assert fail(stale, error="x", error_type="X", final=True, delay=0) is None
    [stale_beat] = leases.heartbeat([(stale.run_id, stale.attempts)], 30).values()
    assert (stale_beat.renewed, stale_beat.held) == (False, False)
    assert leases.heartbeat([(fresh.run_id, fresh.attempts)], 30) == {
        (fresh.run_id, fresh.attempts): leases.Renewal(renewed=True, cancel_requested=False, held=True)
    }
    current = api.get_run(fresh.run_id)
    assert (current.status, current.output, current.failures) == ("running", None, 0)
    assert complete(fresh, '"fresh"') == "succeeded"
    assert api.get_run(fresh.run_id).output == "fresh"


def test_a_heartbeat_never_renews_a_lease_more_than_a_lease_past_the_attempts_timeout():
    api.enqueue("tests.noop", {})
    api.enqueue("tests.noop", {})
    limited, free = claim(limit=2)
    sql("UPDATE durable_run SET attempt_started_at = attempt_started_at - interval '20 seconds'")
    renewals = leases.heartbeat(
        [(limited.run_id, limited.attempts), (free.run_id, free.attempts)], 30, timeouts=[2.5, None]
    )
    assert all(renewal.renewed for renewal in renewals.values())
    rows = dict(
        sql(
            "SELECT run_id, leased_until - attempt_started_at FROM durable_run WHERE run_id = ANY(%s)",
            [[limited.run_id, free.run_id]],
        )
    )
    # The holder has a lease's time past the timeout to land it before anyone may take the run.
    assert rows[limited.run_id] == timedelta(seconds=32.5)
    assert rows[free.run_id] > timedelta(seconds=49)


def test_retry_backoff_sets_available_at_in_the_future_and_counts_failures_only():
    api.enqueue("tests.noop", {})
    [held] = claim()
    assert fail(held, error="boom", error_type="builtins.ValueError", final=False, delay=60) == "pending"
    run = api.get_run(held.run_id)
    assert run.status == "pending" and run.failures == 1 and run.attempts == 1
    assert run.available_at - run.updated_at >= timedelta(seconds=59)
    assert run.error == "boom"
    assert claim() == []


def test_graceful_release_makes_a_run_claimable_at_once_without_counting():
    api.enqueue("tests.noop", {})
    [held] = claim()
    assert claims.release([(held.run_id, held.attempts)]) == 1
    [again] = claim()
    assert again.run_id == held.run_id
    assert (again.attempts, again.recoveries, again.failures) == (2, 0, 0)


def test_a_batch_landing_lands_held_runs_and_refuses_a_stale_token():
    api.enqueue("tests.noop", {})
    [stale] = claim()
    make_due(stale.run_id)  # its lease expires
    [reclaimed] = claim()
    fresh_runs = [api.enqueue("tests.noop", {"n": n}) for n in range(3)]
    held = claim()
    assert {run.run_id for run in held} == {run.run_id for run in fresh_runs}
    batch = [landing.Finished(run.run_id, run.attempts, f'{{"n": {i}}}', None) for i, run in enumerate(held)]
    landed = landing.complete_many([*batch, landing.Finished(stale.run_id, stale.attempts, '"stale"', None)])
    assert landed == {run.run_id for run in held}
    assert [api.get_run(run.run_id).output for run in held] == [{"n": 0}, {"n": 1}, {"n": 2}]
    assert api.get_run(reclaimed.run_id).status == "running"


def test_a_deadlock_inside_a_store_transaction_is_run_again_never_raised():
    """A real deadlock: two transactions lock two rows in opposite orders; PostgreSQL aborts one, which runs again."""
    from durable_django.store import db

    first, second = (api.enqueue("tests.noop", {"n": n}).run_id for n in range(2))
    barrier = threading.Barrier(2)
    tries = []

    def lock_both(order):
        def work():
            tries.append(order)
            with db.cursor() as cur:
                cur.execute("SELECT 1 FROM durable_run WHERE run_id = %s FOR UPDATE", [order[0]])
                if len(tries) <= 2:
                    barrier.wait(10)
                cur.execute("SELECT 1 FROM durable_run WHERE run_id = %s FOR UPDATE", [order[1]])
            return order

        return db.in_transaction(work)

    results = run_in_threads(2, lambda index: lock_both([first, second] if index == 0 else [second, first]))
    assert sorted(results) == sorted([[first, second], [second, first]])
    # One of them deadlocked and ran again (on a loaded machine a retry may meet the other once more).
    assert len(tries) >= 3


def calls_of(function, call):
    """What ``call`` returned, and how many times it made PostgreSQL run ``function``.

    The backend's function counters are read before and after, in one transaction: they may still hold
    calls of earlier transactions (PostgreSQL flushes them when idle, at most once a second), never a flush.
    """
    from django.db import transaction

    def counted():
        query = "SELECT coalesce(sum(calls), 0) FROM pg_stat_xact_user_functions WHERE funcname = %s"
        return sql(query, [function])[0][0]

    with transaction.atomic():
        sql("SET LOCAL track_functions = 'pl'")
        before = counted()
        result = call()
        return result, counted() - before


def test_the_admission_runs_only_when_a_candidate_is_limited_or_a_held_run_was_released():
    enqueue_many(3)
    claimed, admissions = calls_of("durable_admit", lambda: claim(limit=10))
    assert (len(claimed), admissions) == (3, 0)
    enqueue_many(8, name="tests.rated")  # five starts a second
    claimed, admissions = calls_of("durable_admit", lambda: claim(limit=10))
    assert (len(claimed), admissions) == (5, 1)
    assert calls_of("durable_admit", lambda: claim(limit=10)) == ([], 0)  # the rest are held: nothing to admit
    sql("UPDATE durable_rate_start SET started_at = started_at - interval '2 seconds'")  # the window passes
    sql("UPDATE durable_run SET available_at = now() WHERE held_by IS NOT NULL")
    claimed, admissions = calls_of("durable_admit", lambda: claim(limit=10))
    assert (len(claimed), admissions) == (3, 1)  # released, then admitted: never claimed past the limit


def test_a_landing_releases_held_runs_only_when_a_landed_run_held_a_slot():
    enqueue_many(1)
    [free] = claim(limit=1)
    assert calls_of("durable_release_held", lambda: complete(free, "null")) == ("succeeded", 0)
    api.enqueue("tests.limited", {"key": "a"})
    [limited] = claim(limit=1)
    assert calls_of("durable_release_held", lambda: complete(limited, "null")) == ("succeeded", 1)
