"""Run deadlines: a run not finished by its deadline ends failed with DeadlineExceeded, whatever it is doing."""

from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from durable_django import api, enqueue_many
from durable_django.engine import time_limits
from durable_django.exceptions import InvalidInput, LeaseLost
from durable_django.store import journal
from durable_django.testing import pass_deadline, run_until_idle
from tests.helpers import sql
from tests.store.factories import claim, complete
from tests.workflows import effects

pytestmark = pytest.mark.django_db(transaction=True)

DEADLINE_EXCEEDED = "durable_django.exceptions.DeadlineExceeded"


def children_of(run_id):
    return [row[0] for row in sql("SELECT run_id FROM durable_run WHERE parent_run_id = %s", [run_id])]


@pytest.mark.parametrize(
    "deadline, message",
    [
        (datetime.now(UTC) - timedelta(seconds=1), "already passed"),
        (timedelta(0), "already passed"),
        (-5, "negative"),
        (datetime(2099, 1, 1), "timezone-aware"),
        ("tomorrow", "timedelta or a number"),
    ],
)
def test_a_deadline_already_past_or_malformed_is_refused_and_writes_nothing(deadline, message):
    with pytest.raises(InvalidInput, match=message):
        api.enqueue("tests.noop", {}, deadline=deadline)
    assert sql("SELECT count(*) FROM durable_run") == [(0,)]


def test_a_deadline_is_stored_as_given_or_from_the_database_clock():
    at = timezone.now() + timedelta(hours=1)
    assert api.enqueue("tests.noop", {}, deadline=at).deadline == at
    run = api.enqueue("tests.noop", {}, deadline=timedelta(minutes=30))
    [(gap,)] = sql("SELECT deadline - created_at FROM durable_run WHERE run_id = %s", [run.run_id])
    assert timedelta(minutes=29) < gap <= timedelta(minutes=30)


def test_a_pending_run_past_its_deadline_fails_without_running():
    run = api.enqueue("tests.flaky", {"succeed_on": 1}, deadline=timedelta(hours=1), delay=7200)
    pass_deadline(run.run_id)
    run_until_idle()
    failed = api.get_run(run.run_id)
    assert (failed.status, failed.error_type, failed.attempts) == ("failed", DEADLINE_EXCEEDED, 0)
    assert "had not finished by its deadline" in failed.error and failed.leased_until is None
    assert effects.count("flaky-attempt") == 0


def test_a_sleeping_run_past_its_deadline_fails():
    run = api.enqueue("tests.sleeper", {"seconds": 3600}, deadline=timedelta(minutes=30))
    run_until_idle()
    assert api.get_run(run.run_id).status == "waiting"
    pass_deadline(run.run_id)
    run_until_idle()
    failed = api.get_run(run.run_id)
    assert (failed.status, failed.error_type, failed.waiting_for, failed.available_at) == (
        "failed",
        DEADLINE_EXCEEDED,
        None,
        None,
    )
    assert effects.count("after-sleep") == 0


def test_a_waiting_parent_past_its_deadline_fails_and_its_live_child_is_cancelled():
    parent = api.enqueue("tests.parent", {"child": {"wait_signal": True}}, deadline=timedelta(hours=1))
    run_until_idle()
    [child] = children_of(parent.run_id)
    assert api.get_run(child).deadline == api.get_run(parent.run_id).deadline  # inherited
    pass_deadline(child)
    pass_deadline(parent.run_id)  # both have passed, the child's first: the parent's end decides the child's
    run_until_idle()
    assert (api.get_run(parent.run_id).status, api.get_run(parent.run_id).error_type) == ("failed", DEADLINE_EXCEEDED)
    cancelled = api.get_run(child)
    assert (cancelled.status, cancelled.error_type) == ("cancelled", None)


def test_a_child_whose_own_deadline_passes_fails_and_its_parent_hears_of_it():
    parent = api.enqueue(
        "tests.spawn_one",
        {"function": "tests.child", "input": {"wait_signal": True}, "options": {"deadline": 60}},
        deadline=timedelta(hours=1),
    )
    run_until_idle()
    [child] = children_of(parent.run_id)
    assert api.get_run(child).deadline < api.get_run(parent.run_id).deadline  # its own, tighter
    pass_deadline(child)
    run_until_idle()
    done = api.get_run(parent.run_id)
    assert done.status == "succeeded"
    assert done.output["state"] == "failed" and "DeadlineExceeded" in done.output["error"]
    assert api.get_run(child).error_type == DEADLINE_EXCEEDED


def test_children_never_outlive_their_parents_deadline():
    parent = api.enqueue(
        "tests.fan_out", {"n": 2, "options": {"deadline": 7200}, "children": None}, deadline=timedelta(hours=1)
    )
    later = api.enqueue("tests.fan_out", {"n": 2, "options": {"deadline": 600}}, deadline=timedelta(hours=1))
    free = api.enqueue("tests.fan_out", {"n": 1})
    run_until_idle(functions=["tests.fan_out"])
    parent_deadline = api.get_run(parent.run_id).deadline
    assert {api.get_run(child).deadline for child in children_of(parent.run_id)} == {parent_deadline}
    own = {api.get_run(child).deadline for child in children_of(later.run_id)}
    assert len(own) == 1 and own.pop() < api.get_run(later.run_id).deadline
    assert [api.get_run(child).deadline for child in children_of(free.run_id)] == [None]


def test_a_handler_past_its_deadline_stops_at_its_next_context_call():
    # The deadline leaves the claim two seconds (a loaded machine once took longer than 0.3 to start the
    # handler); the first step outlasts it from wherever the handler started.
    run = api.enqueue("tests.two_paced_steps", {"pause": 2.0}, deadline=timedelta(seconds=2))
    run_until_idle()
    failed = api.get_run(run.run_id)
    assert (failed.status, failed.error_type) == ("failed", DEADLINE_EXCEEDED)
    assert effects.count("between-steps") == 1
    assert "v1:second:0" not in journal.load_journal([run.run_id])[run.run_id]


def test_a_run_past_a_pivot_still_fails_at_its_deadline():
    run = api.enqueue("tests.pivot_sleeper", {}, deadline=timedelta(hours=1))
    run_until_idle()
    assert api.cancel(run.run_id) == "refused"
    pass_deadline(run.run_id)
    run_until_idle()
    assert api.get_run(run.run_id).error_type == DEADLINE_EXCEEDED


def test_a_running_run_failed_by_another_worker_fences_out_its_holder():
    run = api.enqueue("tests.noop", {}, deadline=timedelta(hours=1))
    [held] = claim(limit=1)
    pass_deadline(run.run_id)
    assert time_limits.expire_past_deadlines() == 1
    assert api.get_run(run.run_id).status == "failed"
    with pytest.raises(LeaseLost):
        journal.record_step(run.run_id, held.attempts, "v1:late:0", '"late"', pivot=False)
    assert complete(held, '"late"') is None
    assert api.get_run(run.run_id).output is None


def test_a_deadline_failure_gives_up_a_concurrency_slot():
    first = api.enqueue("tests.limited", {"key": "k"}, deadline=timedelta(hours=1))
    [held] = claim(limit=1)
    assert held.run_id == first.run_id
    second = api.enqueue("tests.limited", {"key": "k"})
    assert claim(limit=1) == []
    assert api.get_run(second.run_id).held_by == "concurrency:tests.limited:k"
    pass_deadline(first.run_id)
    time_limits.expire_past_deadlines()
    assert api.get_run(second.run_id).held_by is None
    assert [run.run_id for run in claim(limit=1)] == [second.run_id]


def test_resume_clears_the_deadline():
    run = api.enqueue("tests.noop", {"x": 1}, deadline=timedelta(hours=1), delay=7200)
    pass_deadline(run.run_id)
    run_until_idle()
    assert api.get_run(run.run_id).status == "failed"
    resumed = api.resume(run.run_id)
    assert (resumed.status, resumed.deadline, resumed.error_type) == ("pending", None, None)
    sql("UPDATE durable_run SET available_at = NULL WHERE run_id = %s", [run.run_id])
    run_until_idle()
    assert api.get_run(run.run_id).output == {"x": 1}


def test_a_batch_shares_one_deadline():
    runs = enqueue_many("tests.noop", [{}, {}, {}], deadline=timedelta(minutes=5), delay=3600)
    assert len({run.deadline for run in runs}) == 1
    pass_deadline(runs[1].run_id)
    run_until_idle()
    assert [api.get_run(run.run_id).status for run in runs] == ["pending", "failed", "pending"]


def test_pass_deadline_needs_a_run_with_a_deadline():
    run = api.enqueue("tests.noop", {}, delay=3600)
    with pytest.raises(InvalidInput, match="has no deadline"):
        pass_deadline(run.run_id)
