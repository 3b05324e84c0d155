"""Every attempt of a run is kept, written by the statement that ended it, and steps are timed."""

import pytest

from durable_django import CancelOutcome, RunStatus, api, list_attempts
from durable_django.engine import lifecycle
from durable_django.engine.attempt_state import Outcome
from durable_django.engine.execute import execute
from durable_django.exceptions import RunNotFound
from durable_django.testing import make_due, run_until_idle
from tests.helpers import sql

pytestmark = pytest.mark.django_db(transaction=True)

BOUNDS = lifecycle.claim_bounds(functions=None, queues=None, tenant_id=None)


def claim_one(worker_id="test"):
    [attempt] = lifecycle.claim(limit=1, start_now=1, worker_id=worker_id, bounds=BOUNDS)
    return attempt


def outcomes(run_id):
    return [(record.number, record.outcome) for record in list_attempts(run_id)]


def test_a_run_retried_to_success_keeps_each_attempt_and_its_error():
    run = api.enqueue("tests.flaky", {"succeed_on": 3})
    for _ in range(3):
        run_until_idle()
        make_due(run.run_id) if api.get_run(run.run_id).status == RunStatus.PENDING else None
    assert api.get_run(run.run_id).status == RunStatus.SUCCEEDED
    records = list_attempts(run.run_id)
    assert [(r.number, r.outcome) for r in records] == [(1, "retrying"), (2, "retrying"), (3, "succeeded")]
    assert [r.error_type for r in records] == ["builtins.ValueError", "builtins.ValueError", None]
    assert "attempt 1 fails on purpose" in records[0].error and "attempt 2 fails on purpose" in records[1].error
    assert all(r.started_at <= r.ended_at and r.worker_id for r in records)


def test_the_last_failure_is_failed_and_a_running_attempt_has_no_end():
    run = api.enqueue("tests.always_fails", {})
    attempt = claim_one(worker_id="w-1")
    [running] = list_attempts(run.run_id)
    assert (running.number, running.outcome, running.worker_id, running.ended_at) == (1, "running", "w-1", None)
    assert execute(attempt) == Outcome.RETRYING
    for _ in range(2):
        make_due(run.run_id)
        run_until_idle()
    assert outcomes(run.run_id) == [(1, "retrying"), (2, "retrying"), (3, "failed")]


def test_a_suspension_says_what_it_waits_for_and_a_release_is_released():
    run = api.enqueue("tests.timed_steps", {"seconds": 0.05})
    run_until_idle()
    [suspended] = list_attempts(run.run_id)
    assert (suspended.outcome, suspended.waited_for) == ("suspended", "sleep")
    make_due(run.run_id)
    attempt = claim_one()
    assert lifecycle.release([attempt]) == 1
    assert outcomes(run.run_id) == [(1, "suspended"), (2, "released")]


def test_a_reclaimed_attempt_is_lost_written_by_the_claim_that_took_it_over():
    run = api.enqueue("tests.noop", {})
    stale = claim_one(worker_id="dead")
    make_due(run.run_id)  # its lease expires, as if its worker had died
    fresh = claim_one(worker_id="alive")
    [lost, running] = list_attempts(run.run_id)
    assert (lost.number, lost.outcome, lost.worker_id, lost.error_type) == (
        1,
        "lost",
        "dead",
        "durable_django.exceptions.LeaseLost",
    )
    assert "attempt 2 took the run over" in lost.error
    assert (running.number, running.outcome) == (2, "running")
    # The stale holder's landing is refused by the fence, and writes no record either.
    assert execute(stale) == Outcome.LOST
    assert execute(fresh) == Outcome.SUCCEEDED
    assert outcomes(run.run_id) == [(1, "lost"), (2, "succeeded")]


def test_an_attempt_a_cancel_ends_is_cancelled():
    run = api.enqueue("tests.noop", {})
    # Claimed ahead of a free slot: a cancel ends it at once, in the cancel's own statement.
    lifecycle.claim(limit=1, start_now=0, worker_id="test", bounds=BOUNDS)
    assert api.cancel(run.run_id) == CancelOutcome.CANCELLED
    assert outcomes(run.run_id) == [(1, "cancelled")]


def test_steps_record_when_their_fn_started_and_how_long_it_ran_and_a_replay_changes_neither():
    run = api.enqueue("tests.timed_steps", {"seconds": 0.3})
    run_until_idle()
    [(started, duration)] = sql(
        "SELECT started_at, duration FROM durable_step WHERE run_id = %s AND step_id LIKE %s",
        [run.run_id, "%:slow:%"],
    )
    assert 0.3 <= duration.total_seconds() < 3
    make_due(run.run_id)
    run_until_idle()
    assert api.get_run(run.run_id).status == RunStatus.SUCCEEDED
    journal = sql("SELECT step_id, started_at, duration FROM durable_step WHERE run_id = %s", [run.run_id])
    rows = {step_id.split(":")[1]: (s, d) for step_id, s, d in journal}
    assert rows["slow"] == (started, duration)
    assert rows["after"][0] >= started + duration and rows["after"][1] is not None


def test_an_unknown_run_has_no_attempts_to_list():
    with pytest.raises(RunNotFound):
        list_attempts("no-such-run")


def test_purge_removes_a_runs_attempts_with_it():
    from datetime import timedelta

    run = api.enqueue("tests.noop", {})
    run_until_idle()
    assert sql("SELECT count(*) FROM durable_attempt WHERE run_id = %s", [run.run_id]) == [(1,)]
    sql("UPDATE durable_run SET updated_at = now() - interval '2 days' WHERE run_id = %s", [run.run_id])
    api.purge_finished(older_than=timedelta(days=1))
    assert sql("SELECT count(*) FROM durable_attempt WHERE run_id = %s", [run.run_id]) == [(0,)]
