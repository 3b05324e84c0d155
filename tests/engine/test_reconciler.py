"""The reconciler repairs each state that must not exist, logs and counts it, and leaves healthy runs alone.

The engine no longer produces these states, so each test builds one with SQL,
the way a past bug (or a hand edit) would have left it.
"""

import logging
import threading

import pytest
from django.db import connections, transaction

from durable_django import api
from durable_django.engine.reconciler import Reconciler
from durable_django.testing import run_until_idle
from tests.helpers import sql

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.strands]


def waiting_parent_and_child(**child):
    parent = api.enqueue("tests.parent", {"child": {"wait_signal": True, **child}})
    run_until_idle(functions=["tests.parent"])
    waiting = api.get_run(parent.run_id)
    return parent.run_id, waiting.waiting_for.split(":", 1)[1]


def test_a_parent_left_waiting_for_a_finished_child_is_woken_and_finishes(caplog):
    parent, child = waiting_parent_and_child()
    # What the landing race used to leave: the child landed, the parent still waits.
    sql("UPDATE durable_run SET status = 'succeeded', output = '{\"v\": 1}' WHERE run_id = %s", [child])
    caplog.set_level(logging.WARNING, "durable_django.reconciler")
    [repair] = Reconciler().run_pass()
    assert repair.run_id == parent and "has finished" in repair.problem
    assert f"reconciler: run {parent} waits for child {child}, which has finished" in caplog.text
    assert api.get_run(parent).status == "pending"
    run_until_idle()
    assert api.get_run(parent).output["outcome"] == {"state": "succeeded", "result": {"v": 1}, "error": None}
    assert Reconciler().run_pass() == [] and Reconciler().stranded() == []


def test_a_run_waiting_for_a_signal_already_stored_is_woken():
    run = api.enqueue("tests.signal_waiter", {})
    run_until_idle()
    sql(
        "INSERT INTO durable_signal (run_id, signal, occurrence, value, created_at) "
        "VALUES (%s, 'approval', 0, '\"yes\"', now())",
        [run.run_id],
    )
    assert [repair.run_id for repair in Reconciler().run_pass()] == [run.run_id]
    run_until_idle()
    assert api.get_run(run.run_id).output == {"approval": "yes"}


@pytest.mark.parametrize(
    "waiting_for, available_at", [("sleep", None), (None, None), ("nonsense", None), ("child:no-such-run", None)]
)
def test_a_run_waiting_for_nothing_that_can_wake_it_is_woken(waiting_for, available_at):
    run = api.enqueue("tests.signal_waiter", {})
    sql(
        "UPDATE durable_run SET status = 'waiting', waiting_for = %s, available_at = %s WHERE run_id = %s",
        [waiting_for, available_at, run.run_id],
    )
    [repair] = Reconciler().run_pass()
    assert repair.run_id == run.run_id and api.get_run(run.run_id).status == "pending"


def test_a_waiting_run_something_can_still_wake_is_left_alone():
    parent, _child = waiting_parent_and_child()
    sleeper = api.enqueue("tests.sleeper", {"seconds": 3600})
    run_until_idle(functions=["tests.sleeper"])
    assert Reconciler().run_pass() == []
    assert api.get_run(parent).status == "waiting" and api.get_run(sleeper.run_id).status == "waiting"


def test_a_live_child_of_a_finished_parent_is_cancelled_unless_past_a_pivot():
    parent, child = waiting_parent_and_child()
    sql("UPDATE durable_run SET status = 'succeeded' WHERE run_id = %s", [parent])
    [repair] = Reconciler().run_pass()
    assert repair.run_id == child and "cancelled" in repair.action
    assert api.get_run(child).status == "cancelled"


def test_a_run_left_running_past_its_lease_with_no_recovery_left_is_failed(settings):
    run = api.enqueue("tests.noop", {})
    sql(
        "UPDATE durable_run SET status = 'running', attempts = 11, recoveries = 10, "
        "leased_until = now() - interval '1 hour' WHERE run_id = %s",
        [run.run_id],
    )
    [repair] = Reconciler().run_pass()
    failed = api.get_run(run.run_id)
    assert (failed.status, failed.error_type) == ("failed", "durable_django.exceptions.RecoveriesExhausted")
    assert repair.action == "failed"


def test_the_scans_walk_every_run_in_bounded_chunks_across_passes():
    waiting = []
    for _ in range(7):
        run = api.enqueue("tests.signal_waiter", {})
        waiting.append(run.run_id)
    sql("UPDATE durable_run SET status = 'waiting', waiting_for = 'sleep', available_at = NULL")
    reconciler = Reconciler(chunk=3)
    repaired = [repair.run_id for _ in range(3) for repair in reconciler.run_pass()]
    assert sorted(repaired) == sorted(waiting)


def test_only_one_worker_reconciles_at_a_time():
    run = api.enqueue("tests.signal_waiter", {})
    sql("UPDATE durable_run SET status = 'waiting', waiting_for = NULL WHERE run_id = %s", [run.run_id])
    holding, release = threading.Event(), threading.Event()

    def hold_the_lock():
        try:
            with transaction.atomic():
                sql("SELECT pg_advisory_xact_lock(hashtext('durable_django.reconcile'))")
                holding.set()
                release.wait(30)
        finally:
            connections.close_all()

    holder = threading.Thread(target=hold_the_lock)
    holder.start()
    assert holding.wait(30)
    try:
        assert Reconciler().run_pass() == []  # another worker is reconciling: this one skips its pass
    finally:
        release.set()
        holder.join(30)
    assert [repair.run_id for repair in Reconciler().run_pass()] == [run.run_id]


def test_a_worker_counts_its_repairs_in_its_summary(workers):
    run = api.enqueue("tests.signal_waiter", {})
    sql("UPDATE durable_run SET status = 'waiting', waiting_for = NULL WHERE run_id = %s", [run.run_id])
    from tests.helpers import wait_until

    worker = workers.start("--concurrency", "1", DURABLE_TEST_POLL_SECONDS="1")
    wait_until(
        lambda: (
            api.get_run(run.run_id).status == "waiting" and api.get_run(run.run_id).waiting_for == "signal:approval:0"
        ),
        timeout=30,
        message="the run to be woken, replay and wait again, properly",
    )
    worker.send_signal(15)
    assert worker.wait(timeout=30) == 0
    assert "repaired 1" in workers.output(worker)


def gathering_parent(*, wait_any=False, children=3):
    """A parent waiting for all (or any) of its children, each of which waits for a signal: (parent, child ids)."""
    specs = [{"value": n, "wait_signal": True} for n in range(children)]
    if wait_any:
        parent = api.enqueue("tests.race_children", {"children": specs})
    else:
        parent = api.enqueue("tests.fan_out", {"children": specs})
    run_until_idle()
    return parent.run_id, [
        row[0] for row in sql("SELECT run_id FROM durable_run WHERE parent_run_id = %s", [parent.run_id])
    ]


@pytest.mark.parametrize("wait_any", [False, True], ids=["all", "any"])
def test_a_parent_left_waiting_for_children_whose_wait_is_over_is_woken_and_finishes(wait_any):
    parent, children = gathering_parent(wait_any=wait_any)
    assert Reconciler().stranded() == [] and Reconciler().any_stranded(worker_live=True) == []
    # What a lost count would leave: the children landed, the parent still waits.
    ended = children if not wait_any else children[:1]
    sql(
        "UPDATE durable_run SET status = 'succeeded', output = '{\"value\": 7}', finished_at = now() "
        "WHERE run_id = ANY(%s)",
        [ended],
    )
    [found] = Reconciler().stranded()
    assert found.run_id == parent and "that wait is over" in found.problem
    assert Reconciler().any_stranded(worker_live=True) == [found]  # what durable_health asks
    [repair] = Reconciler().run_pass()
    assert repair.run_id == parent and api.get_run(parent).status == "pending"
    run_until_idle(functions=["tests.fan_out", "tests.race_children"])
    done = api.get_run(parent)
    assert done.status == "succeeded", done.error
    assert Reconciler().stranded() == []


def test_a_parent_waiting_for_children_it_no_longer_awaits_is_woken():
    parent, children = gathering_parent(wait_any=True)
    # A wait whose marks were lost: no awaited child, live or finished, and no deadline.
    sql("UPDATE durable_run SET awaited_token = NULL WHERE run_id = ANY(%s)", [children])
    [found] = Reconciler().any_stranded(worker_live=True)
    assert found.run_id == parent and "none of which is live" in found.problem
    [repair] = Reconciler().run_pass()
    assert repair.run_id == parent and "none of which is live" in repair.problem


def test_a_parent_whose_children_still_run_is_left_alone():
    gathering_parent()
    gathering_parent(wait_any=True)
    assert Reconciler().run_pass() == [] and Reconciler().stranded() == []
    assert Reconciler().any_stranded(worker_live=True) == []


def test_healthy_children_waits_never_crowd_a_stranded_run_out_of_the_health_checks_answer():
    for _ in range(3):
        gathering_parent()
    waiter = api.enqueue("tests.signal_waiter", {})
    run_until_idle(functions=["tests.signal_waiter"])
    sql(
        "INSERT INTO durable_signal (run_id, signal, occurrence, value, created_at) "
        "VALUES (%s, 'approval', 0, '\"yes\"', now())",
        [waiter.run_id],
    )
    # One answer asked for: it must be the stranded run, not one of the gatherers waiting as they should.
    assert [repair.run_id for repair in Reconciler().any_stranded(worker_live=True, limit=1)] == [waiter.run_id]


def test_the_health_checks_question_finds_what_a_full_walk_finds_in_three_statements(django_assert_num_queries):
    """Reconciler.any_stranded() answers in one statement per kind; it must agree with stranded() on each kind."""
    signal_waiter = api.enqueue("tests.signal_waiter", {})
    run_until_idle(functions=["tests.signal_waiter"])
    parent_of_finished, finished_child = waiting_parent_and_child()
    orphan_parent, orphan = waiting_parent_and_child()
    sleeper = api.enqueue("tests.sleeper", {"seconds": 3600})
    run_until_idle(functions=["tests.sleeper"])
    healthy = Reconciler()
    with django_assert_num_queries(3):
        assert healthy.any_stranded(worker_live=True) == []

    sql(
        "INSERT INTO durable_signal (run_id, signal, occurrence, value, created_at) "
        "VALUES (%s, 'approval', 0, '\"yes\"', now())",
        [signal_waiter.run_id],
    )
    sql("UPDATE durable_run SET status = 'succeeded' WHERE run_id = %s", [finished_child])
    sql("UPDATE durable_run SET status = 'failed' WHERE run_id = %s", [orphan_parent])
    sql("UPDATE durable_run SET available_at = NULL WHERE run_id = %s", [sleeper.run_id])
    expired = api.enqueue("tests.noop", {})
    sql(
        "UPDATE durable_run SET status = 'running', attempts = 1, leased_until = now() - interval '1 hour' "
        "WHERE run_id = %s",
        [expired.run_id],
    )
    walked = {repair.run_id for repair in Reconciler().stranded()}
    with django_assert_num_queries(3):
        found = Reconciler().any_stranded(worker_live=True)
    problems = {repair.run_id: repair.problem for repair in found}
    assert set(problems) == walked | {expired.run_id}
    assert set(problems) == {signal_waiter.run_id, parent_of_finished, orphan, sleeper.run_id, expired.run_id}
    assert "more than three leases after its lease expired" in problems[expired.run_id]
    # With no live worker, a run left running is nobody's to reclaim yet: not counted.
    with django_assert_num_queries(2):
        assert expired.run_id not in {repair.run_id for repair in Reconciler().any_stranded(worker_live=False)}
    assert len(Reconciler().any_stranded(worker_live=True, limit=1)) == 3  # at most one of each kind
