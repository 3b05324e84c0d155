"""One attempt's machinery under stress: stops after an event loop closed, a cancel racing a pivot step's
journal write, and a handler's own transaction (the worker's threads around it: tests/worker)."""

import threading

import pytest
from django.db import transaction

from durable_django import CancelOutcome, api, faults
from durable_django.engine import lifecycle
from durable_django.engine.attempt_state import Outcome
from durable_django.engine.execute import execute
from durable_django.testing import run_until_idle
from durable_django.worker.heartbeat import Heartbeat
from durable_django.worker.slots import SlotPool
from tests.helpers import sql
from tests.workflows import effects

pytestmark = pytest.mark.django_db(transaction=True)

BOUNDS = lifecycle.claim_bounds(functions=None, queues=None, tenant_id=None)


def claim_one(**options):
    [attempt] = lifecycle.claim(limit=1, start_now=1, worker_id=options.pop("worker_id", "test"), bounds=BOUNDS)
    return attempt


def test_stopping_an_async_attempt_after_its_event_loop_closed_is_harmless():
    api.enqueue("tests.async_fails", {})
    attempt = claim_one()
    assert execute(attempt) == Outcome.FAILED
    # The heartbeat may still hold it (its landing is in flight) and find its lease gone.
    attempt.stop(lost=True)
    attempt.stop(cancelled=True)
    assert attempt.lost


def test_a_cancel_landed_by_the_heartbeat_between_a_pivot_function_and_its_journal_write_waits():
    run = api.enqueue("tests.pivot", {})
    attempt = claim_one()
    pool = SlotPool(1)
    pool.add([attempt])
    outcomes = []

    def cancel_and_beat():
        # Right after the irreversible function returned, before its value is journalled.
        outcomes.append(api.cancel(run.run_id))
        Heartbeat(pool, threading.Event(), lambda reachable: None).beat()

    with faults.injected("step.returned", cancel_and_beat):
        assert execute(attempt) == Outcome.SUSPENDED  # it carried on, to its signal wait
    assert outcomes == [CancelOutcome.REQUESTED]
    after = api.get_run(run.run_id)
    assert after.status == "waiting" and after.pivoted_at is not None and after.cancel_refused_at is not None
    assert sql("SELECT step_id FROM durable_step WHERE run_id = %s", [run.run_id]) == [("v1:ship:0",)]
    assert effects.count("shipped") == 1
    assert api.cancel(run.run_id) == CancelOutcome.REFUSED


def test_a_context_call_inside_the_handlers_own_atomic_block_fails_clearly_instead_of_stranding():
    run = api.enqueue("tests.atomic_handler", {})
    for _ in range(3):
        run_until_idle()
        sql("UPDATE durable_run SET available_at = now() WHERE run_id = %s AND status = 'pending'", [run.run_id])
    failed = api.get_run(run.run_id)
    assert (failed.status, failed.error_type) == ("failed", "durable_django.exceptions.InvalidInput")
    assert "inside a transaction.atomic() block the handler opened" in failed.error
    assert sql("SELECT count(*) FROM durable_step") == [(0,)]


@pytest.mark.django_db(transaction=False)
def test_run_until_idle_inside_a_tests_own_transaction_still_runs_steps():
    with transaction.atomic():
        run = api.enqueue("tests.two_steps", {})
        assert run_until_idle() == 1
        assert api.get_run(run.run_id).output == ["one", "two"]
