"""Every attempt kept, as real durable_worker processes end them: lost to SIGKILL (written by the worker
that reclaims the run), released at a SIGTERM, retried, suspended, timed out; and a parked run resumed."""

import signal

import pytest

from durable_django import api, list_attempts
from tests.helpers import sql, wait_until
from tests.workflows import effects

pytestmark = [pytest.mark.process, pytest.mark.django_db(transaction=True)]

SHORT_LEASE = {"DURABLE_TEST_LEASE_SECONDS": "2"}


def status(run_id):
    return api.get_run(run_id).status


def outcomes(run_id):
    return [record.outcome for record in list_attempts(run_id)]


def test_a_sigkilled_attempt_is_lost_written_by_the_worker_that_reclaims_it(workers):
    run = api.enqueue("tests.two_steps", {"second_sleep": 60})
    doomed = workers.start("--concurrency", "1", **SHORT_LEASE)
    wait_until(lambda: effects.exists("in-second"), message="the second step to start")
    [running] = list_attempts(run.run_id)
    assert (running.outcome, running.ended_at) == ("running", None)
    doomed.send_signal(signal.SIGKILL)
    doomed.wait(timeout=10)
    sql("UPDATE durable_run SET input = '{\"second_sleep\": 0}' WHERE run_id = %s", [run.run_id])
    workers.start("--concurrency", "1", **SHORT_LEASE)
    wait_until(lambda: status(run.run_id) == "succeeded", timeout=60, message="recovery")
    lost, succeeded = list_attempts(run.run_id)
    assert (lost.number, lost.outcome, lost.error_type) == (1, "lost", "durable_django.exceptions.LeaseLost")
    assert (succeeded.number, succeeded.outcome) == (2, "succeeded")
    # Each attempt names its own worker: the dead one, then the one that took the run over.
    assert lost.worker_id == running.worker_id != succeeded.worker_id
    assert lost.started_at < lost.ended_at <= succeeded.started_at


def test_a_sigterm_past_the_grace_period_leaves_a_released_attempt(workers):
    run = api.enqueue("tests.slow", {"seconds": 30, "tag": "kept"})
    worker = workers.start("--concurrency", "1", "--grace", "0.5")
    wait_until(lambda: effects.exists("slow-started-kept"), message="the attempt to start")
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=20) == 0
    [released] = list_attempts(run.run_id)
    assert (released.outcome, released.error) == ("released", None) and released.ended_at is not None


def test_retries_suspensions_and_timeouts_each_leave_their_outcome(workers):
    retried = api.enqueue("tests.flaky", {"succeed_on": 2})
    exhausted = api.enqueue("tests.always_fails", {})
    napping = api.enqueue("tests.timed_steps", {"seconds": 0.1, "nap": 1})
    stuck = api.enqueue("tests.stuck_once", {})
    workers.start("--concurrency", "4", "--max-abandoned", "4")
    runs = (retried, exhausted, napping, stuck)
    wait_until(
        lambda: all(status(run.run_id) in ("succeeded", "failed") for run in runs), timeout=90, message="every run"
    )
    assert outcomes(retried.run_id) == ["retrying", "succeeded"]
    assert outcomes(exhausted.run_id) == ["retrying", "retrying", "failed"]
    assert all("on purpose" in record.error for record in list_attempts(exhausted.run_id))
    suspended, woke = list_attempts(napping.run_id)
    assert (suspended.outcome, suspended.waited_for, woke.outcome) == ("suspended", "sleep", "succeeded")
    [timed_out] = list_attempts(stuck.run_id)
    assert timed_out.outcome == "timed_out" and "ran longer than its timeout of 1s" in timed_out.error


def test_a_parked_run_holds_no_worker_until_resumed_then_finishes_on_a_worker(workers):
    run = api.enqueue("tests.parks", {"succeed_on": 3})
    worker = workers.start("--concurrency", "2")
    wait_until(lambda: status(run.run_id) == "waiting", timeout=60, message="the run to park")
    parked = api.get_run(run.run_id)
    assert (parked.waiting_for, parked.leased_until) == ("operator", None) and parked.parked_at is not None
    assert "attempt 2 fails on purpose" in parked.error
    # The worker goes on serving others and never claims the parked run again.
    other = api.enqueue("tests.noop", {})
    wait_until(lambda: status(other.run_id) == "succeeded", timeout=60, message="another run")
    assert api.get_run(run.run_id).attempts == 2 and effects.count("parks-attempt") == 2
    api.resume(run.run_id)
    wait_until(lambda: status(run.run_id) == "succeeded", timeout=60, message="the resumed run")
    assert outcomes(run.run_id) == ["retrying", "failed", "succeeded"]
    assert api.get_run(run.run_id).output == "done" and worker.poll() is None
