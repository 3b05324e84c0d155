"""Sleeps and children with real worker processes."""

import signal

import pytest

from durable_django import api
from tests.helpers import sql, wait_until
from tests.workflows import effects

pytestmark = [pytest.mark.process, pytest.mark.django_db(transaction=True)]


def status(run_id):
    return api.get_run(run_id).status


def test_a_single_slot_worker_runs_other_work_while_a_run_sleeps_and_resumes_it_after_its_deadline(workers):
    # Ten seconds leave room for twenty no-op runs on a loaded machine, where three once did not.
    sleeper = api.enqueue("tests.sleeper", {"seconds": 10})
    workers.start("--concurrency", "1", DURABLE_TEST_POLL_SECONDS="30")
    wait_until(lambda: status(sleeper.run_id) == "waiting", message="the sleeper to suspend")
    others = [api.enqueue("tests.noop", {"n": n}) for n in range(20)]
    wait_until(
        lambda: all(status(run.run_id) == "succeeded" for run in others),
        timeout=30,
        message="other runs to finish while the sleeper sleeps",
    )
    assert status(sleeper.run_id) == "waiting"
    wait_until(lambda: status(sleeper.run_id) == "succeeded", timeout=60, message="the sleeper to wake")
    done = api.get_run(sleeper.run_id)
    assert done.output == "after" and done.failures == 0


def test_sigkill_between_spawn_and_the_next_step_still_yields_one_child(workers):
    parent = api.enqueue("tests.parent", {"pause_after_spawn": 60})
    doomed = workers.start("--concurrency", "1", DURABLE_TEST_LEASE_SECONDS="2")
    wait_until(lambda: effects.exists("spawned-marker"), message="the spawn to commit")
    doomed.send_signal(signal.SIGKILL)
    doomed.wait(timeout=10)
    sql("UPDATE durable_run SET input = '{}' WHERE run_id = %s", [parent.run_id])
    workers.start("--concurrency", "2", DURABLE_TEST_LEASE_SECONDS="2")
    wait_until(lambda: status(parent.run_id) == "succeeded", timeout=60, message="the parent to finish")
    children = sql("SELECT run_id FROM durable_run WHERE parent_run_id = %s", [parent.run_id])
    assert len(children) == 1
    assert api.get_run(parent.run_id).output["child"] == children[0][0]


def test_a_signal_wakes_a_waiting_run_at_once_through_notify(workers):
    run = api.enqueue("tests.signal_waiter", {})
    workers.start("--concurrency", "1", DURABLE_TEST_POLL_SECONDS="60")
    wait_until(lambda: status(run.run_id) == "waiting", message="the wait")
    api.emit_signal(run.run_id, "approval", "go")
    wait_until(lambda: status(run.run_id) == "succeeded", timeout=6, message="the signal to wake the run")
    assert api.get_run(run.run_id).output == {"approval": "go"}


def test_cancelling_a_running_run_lands_it_cancelled_at_its_next_step(workers):
    from durable_django import CancelOutcome

    run = api.enqueue("tests.busy_steps", {"steps": 10000, "pause": 0.02})
    workers.start("--concurrency", "1")
    wait_until(
        lambda: sql("SELECT count(*) FROM durable_step WHERE run_id = %s", [run.run_id])[0][0] > 3,
        message="the run to be busy",
    )
    assert api.cancel(run.run_id) == CancelOutcome.REQUESTED
    wait_until(lambda: status(run.run_id) == "cancelled", timeout=10, message="the cancel to land")
    cancelled = api.get_run(run.run_id)
    assert cancelled.output is None and cancelled.leased_until is None


def test_cancelling_a_run_inside_a_long_step_lands_it_at_the_heartbeat(workers):
    from durable_django import CancelOutcome

    run = api.enqueue("tests.slow", {"seconds": 60, "tag": "hb"})
    workers.start("--concurrency", "1", DURABLE_TEST_LEASE_SECONDS="1.5")
    wait_until(lambda: effects.exists("slow-started-hb"), message="the attempt to start")
    assert api.cancel(run.run_id) == CancelOutcome.REQUESTED
    wait_until(lambda: status(run.run_id) == "cancelled", timeout=10, message="the heartbeat to land the cancel")
    assert api.get_run(run.run_id).output is None
