"""Parking: a run whose last allowed attempt fails waits for an operator instead of failing."""

import pytest

from durable_django import CancelOutcome, RetryPolicy, RunStatus, api, list_attempts
from durable_django.api import operations
from durable_django.engine.reconciler import Reconciler
from durable_django.exceptions import InvalidInput
from durable_django.testing import make_due, run_until_idle
from tests.helpers import sql
from tests.workflows import effects

pytestmark = pytest.mark.django_db(transaction=True)


def park(run_id):
    run_until_idle()  # attempt 1 fails and is retried at once (no delay); attempt 2 fails and parks
    run = api.get_run(run_id)
    assert run.status == RunStatus.WAITING, run
    return run


def test_a_run_whose_last_attempt_fails_is_parked_holding_nothing_and_keeping_its_error():
    run = park(api.enqueue("tests.parks", {"succeed_on": 99}).run_id)
    assert run.waiting_for == "operator" and run.parked_at is not None
    assert run.leased_until is None and run.finished_at is None and run.available_at is None
    assert run.error_type == "builtins.ValueError" and "attempt 2 fails on purpose" in run.error
    assert [(r.number, r.outcome) for r in list_attempts(run.run_id)] == [(1, "retrying"), (2, "failed")]
    # Nothing claims it, and the reconciler has nothing to repair.
    assert run_until_idle() == 0
    assert Reconciler().stranded() == [] and Reconciler().any_stranded(worker_live=True) == []
    assert Reconciler().run_pass() == []
    assert api.get_run(run.run_id).status == RunStatus.WAITING


def test_resume_continues_a_parked_run_with_a_fresh_budget_and_its_journal():
    run = park(api.enqueue("tests.parks", {"succeed_on": 3}).run_id)
    resumed = api.resume(run.run_id)
    assert (resumed.status, resumed.parked_at, resumed.waiting_for, resumed.error) == ("pending", None, None, None)
    run_until_idle()
    done = api.get_run(run.run_id)
    assert (done.status, done.output) == (RunStatus.SUCCEEDED, "done")
    assert effects.count("parks-attempt") == 3
    # The step journalled by attempt 1 was replayed, not run again: one entry.
    assert sql("SELECT count(*) FROM durable_step WHERE run_id = %s", [run.run_id]) == [(1,)]
    assert [r.outcome for r in list_attempts(run.run_id)] == ["retrying", "failed", "succeeded"]


def test_a_resumed_run_that_fails_its_fresh_budget_again_parks_again():
    run = park(api.enqueue("tests.parks", {"succeed_on": 99}).run_id)
    api.resume(run.run_id)
    again = park(run.run_id)
    assert again.parked_at is not None and [r.outcome for r in list_attempts(run.run_id)] == [
        "retrying",
        "failed",
        "retrying",
        "failed",
    ]


def test_cancel_ends_a_parked_run():
    run = park(api.enqueue("tests.parks", {"succeed_on": 99}).run_id)
    assert api.cancel(run.run_id) == CancelOutcome.CANCELLED
    assert api.get_run(run.run_id).status == RunStatus.CANCELLED


def test_the_health_check_counts_parked_runs_and_fails_past_the_limit():
    def parked_line(**limit):
        [result] = [r for r in operations.health(**limit) if r.check == "parked"]
        return str(result)

    assert parked_line() == "OK parked: 0"
    park(api.enqueue("tests.parks", {"succeed_on": 99}).run_id)
    assert parked_line() == "OK parked: 1"
    assert parked_line(max_parked=1) == "OK parked: 1"
    assert parked_line(max_parked=0).startswith("FAIL parked: 1 ")


def test_a_policy_that_fails_by_default_still_fails():
    run = api.enqueue("tests.always_fails", {})

    for _ in range(3):
        run_until_idle()
        if api.get_run(run.run_id).status == RunStatus.PENDING:
            make_due(run.run_id)
    assert api.get_run(run.run_id).status == RunStatus.FAILED


@pytest.mark.parametrize("value", ["parked", "", None, 1, "PARK"])
def test_an_unknown_on_exhausted_is_invalid_input(value):
    with pytest.raises(InvalidInput, match="on_exhausted"):
        RetryPolicy(on_exhausted=value)


def test_the_policy_is_snapshotted_with_the_run():
    assert RetryPolicy(on_exhausted="park").as_json()["on_exhausted"] == "park"
    assert "on_exhausted" not in RetryPolicy().as_json()
    assert RetryPolicy.from_json(RetryPolicy(on_exhausted="park").as_json()).parks


def test_a_parked_parent_keeps_its_children_and_a_resume_finds_them_alive():
    parent = park_once(api.enqueue("tests.parks_with_child", {}).run_id)
    [child] = sql("SELECT run_id, status FROM durable_run WHERE parent_run_id = %s", [parent.run_id])
    # Parked is not an end: the cascade that cancels an ended run's children does not run.
    assert child[1] == "waiting"
    assert api.cancel(parent.run_id) == CancelOutcome.CANCELLED
    assert sql("SELECT status FROM durable_run WHERE run_id = %s", [child[0]]) == [("cancelled",)]


def park_once(run_id):
    run_until_idle()
    run = api.get_run(run_id)
    assert (run.status, run.waiting_for) == (RunStatus.WAITING, "operator"), run
    return run
