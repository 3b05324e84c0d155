import uuid
from datetime import timedelta

import pytest

from durable_django import api
from durable_django.exceptions import RunNotFound
from durable_django.testing import make_due, run_until_idle
from tests.helpers import run_in_threads, sql
from tests.workflows import effects

pytestmark = pytest.mark.django_db(transaction=True)


def test_sleep_journals_a_database_deadline_releases_the_lease_and_resumes_after_it(effects_dir):
    run = api.enqueue("tests.sleeper", {"seconds": 3600})
    run_until_idle()
    asleep = api.get_run(run.run_id)
    assert asleep.status == "waiting" and asleep.waiting_for == "sleep" and asleep.leased_until is None
    [(deadline,)] = sql("SELECT (result->>'at')::timestamptz FROM durable_step WHERE step_id = 'v1:nap:0'")
    assert deadline == asleep.available_at and deadline - asleep.updated_at >= timedelta(minutes=59)
    assert run_until_idle() == 0  # nothing is claimable before the deadline
    make_due(run.run_id)  # the hour passes
    assert run_until_idle() == 1
    done = api.get_run(run.run_id)
    assert (done.status, done.output, done.failures) == ("succeeded", "after", 0)
    assert effects.count("before-sleep") == 1 and effects.count("after-sleep") == 1


def test_a_signal_emitted_before_the_wait_is_kept_and_returned():
    run = api.enqueue("tests.signal_waiter", {})
    assert api.emit_signal(run.run_id, "approval", {"by": "ops"}) == {"by": "ops"}
    run_until_idle()
    assert api.get_run(run.run_id).output == {"approval": {"by": "ops"}}


def test_a_signal_after_the_wait_wakes_the_run():
    run = api.enqueue("tests.signal_waiter", {})
    run_until_idle()
    waiting = api.get_run(run.run_id)
    assert waiting.status == "waiting" and waiting.waiting_for == "signal:approval:0"
    api.emit_signal(run.run_id, "approval", "yes")
    assert api.get_run(run.run_id).status == "pending"
    run_until_idle()
    assert api.get_run(run.run_id).output == {"approval": "yes"}


def test_the_first_committed_signal_wins_and_later_emits_return_it():
    run = api.enqueue("tests.signal_waiter", {})
    values = run_in_threads(8, lambda i: api.emit_signal(run.run_id, "approval", f"value-{i}"))
    assert len(set(values)) == 1
    run_until_idle()
    assert api.get_run(run.run_id).output == {"approval": values[0]}
    assert api.emit_signal(run.run_id, "approval", "too late") == values[0]


def test_a_wait_timeout_resumes_the_run_with_the_default():
    run = api.enqueue("tests.signal_waiter", {"timeout": 3600})
    run_until_idle()
    assert run_until_idle() == 0
    make_due(run.run_id)  # the timeout passes
    run_until_idle()
    assert api.get_run(run.run_id).output == {"approval": "no answer"}


def test_signals_are_tenant_scoped():
    tenant, stranger = uuid.uuid4(), uuid.uuid4()
    run = api.enqueue("tests.signal_waiter", {}, tenant_id=tenant)
    with pytest.raises(RunNotFound):
        api.emit_signal(run.run_id, "approval", "forged", tenant_id=stranger)
    assert api.emit_signal(run.run_id, "approval", "real", tenant_id=tenant) == "real"


def test_a_child_is_spawned_once_awaited_and_wakes_its_parent(effects_dir):
    parent = api.enqueue("tests.parent", {"child": {"value": 5}})
    run_until_idle()
    done = api.get_run(parent.run_id)
    assert done.status == "succeeded", done.error
    child_id = done.output["child"]
    child = api.get_run(child_id)
    assert child.parent_run_id == parent.run_id and child.tenant_id is None
    assert done.output["outcome"] == {
        "state": "succeeded",
        "result": {"child_of": parent.run_id, "value": 5},
        "error": None,
    }
    # The parent replayed after the child landed: code outside steps ran twice, spawn adopted one child.
    assert effects.count("spawned") == 2 and effects.count("child-ran") == 1
    assert sql("SELECT count(*) FROM durable_run WHERE parent_run_id = %s", [parent.run_id]) == [(1,)]


def test_a_failed_child_reports_failed_to_its_parent():
    parent = api.enqueue("tests.parent", {"child": {"fail": True}})
    run_until_idle()
    for _ in range(3):  # the child's retries come after its (jittered, maybe near zero) backoff
        waiting = api.get_run(parent.run_id)
        if waiting.status != "waiting":
            break
        make_due(waiting.waiting_for.split(":", 1)[1])
        run_until_idle()
    outcome = api.get_run(parent.run_id).output["outcome"]
    assert outcome["state"] == "failed" and "child failed on purpose" in outcome["error"]


def test_a_result_wait_timeout_cancels_the_child_and_its_descendants():
    parent = api.enqueue("tests.parent", {"child": {"wait_signal": True}, "timeout": 3600})
    run_until_idle()
    child_id = api.get_run(parent.run_id).waiting_for.split(":", 1)[1]
    make_due(parent.run_id)  # the wait's timeout passes
    run_until_idle()
    done = api.get_run(parent.run_id)
    assert done.output["outcome"] == {"state": "timeout", "result": None, "error": None}
    assert api.get_run(child_id).status == "cancelled"


def test_wait_for_result_on_a_run_that_is_not_a_child_is_refused_clearly():
    stranger = api.enqueue("tests.noop", {})
    run = api.enqueue("tests.await_stranger", {"run_id": stranger.run_id})
    run_until_idle(functions=["tests.await_stranger"])
    failed = api.get_run(run.run_id)
    assert failed.error_type == "durable_django.exceptions.NotAChild"
    assert f"run {stranger.run_id} is not a direct child of run {run.run_id}" in failed.error


def test_purge_never_deletes_a_finished_parent_before_its_children():
    parent = api.enqueue("tests.parent", {"child": {"wait_signal": True}})
    run_until_idle()
    child_id = api.get_run(parent.run_id).waiting_for.split(":", 1)[1]
    # The parent has finished, long ago, while its child, past a pivot (no cancel touches it), lives on.
    sql("UPDATE durable_run SET pivoted_at = now() WHERE run_id = %s", [child_id])
    sql(
        "UPDATE durable_run SET status = 'succeeded', waiting_for = NULL, available_at = NULL, "
        "updated_at = now() - interval '2 days' WHERE run_id = %s",
        [parent.run_id],
    )
    assert api.purge_finished(older_than=timedelta(days=1)) == 0
    assert api.get_run(child_id) is not None and api.get_run(parent.run_id) is not None
    # The child finishes, but only just: the tree is not old enough yet.
    sql("UPDATE durable_run SET status = 'cancelled' WHERE run_id = %s", [child_id])
    assert api.purge_finished(older_than=timedelta(days=1)) == 0
    # Once every member landed before the cutoff, the tree goes whole.
    sql("UPDATE durable_run SET updated_at = now() - interval '2 days' WHERE run_id = %s", [child_id])
    assert api.purge_finished(older_than=timedelta(days=1)) == 2
    assert api.get_run(child_id) is None and api.get_run(parent.run_id) is None


def test_a_child_that_succeeds_on_a_retry_reports_no_error_to_its_waiting_parent():
    parent = api.enqueue("tests.parent", {"child": {"fail_first": True, "value": 7}})
    for _ in range(20):  # the child's retry waits for its (short) backoff
        if api.get_run(parent.run_id).status == "succeeded":
            break
        for pending in api.list_runs(status="pending").items:
            make_due(pending.run_id)
        run_until_idle()
    done = api.get_run(parent.run_id)
    child_id = done.output["child"]
    assert done.output["outcome"] == {
        "state": "succeeded",
        "result": {"child_of": parent.run_id, "value": 7},
        "error": None,
    }
    # The child itself keeps the failure it recovered from, for the operator.
    child = api.get_run(child_id)
    assert child.failures == 1 and "child failed on purpose" in child.error
