"""Every status change the store's SQL makes is one ``states.ALLOWED_TRANSITIONS`` allows, and each allowed
one is made: a trigger records what the statements really do while a workload drives every transition."""

import pytest

from durable_django import api
from durable_django.engine.execute import execute
from durable_django.states import ALLOWED_TRANSITIONS
from durable_django.store import claims
from durable_django.testing import claim, make_due, pass_deadline, run_until_idle
from tests.helpers import sql

pytestmark = pytest.mark.django_db(transaction=True)

RECORDER = """
CREATE TABLE observed_transition (before text, after text);
CREATE FUNCTION record_transition() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.status <> NEW.status OR (NEW.status = 'running' AND OLD.attempts <> NEW.attempts) THEN
        INSERT INTO observed_transition VALUES (OLD.status, NEW.status);
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER record_transition AFTER UPDATE ON durable_run FOR EACH ROW EXECUTE FUNCTION record_transition();
"""


@pytest.fixture
def observed():
    sql(RECORDER)
    yield lambda: {(before, after) for before, after in sql("SELECT DISTINCT before, after FROM observed_transition")}
    sql(
        "DROP TRIGGER record_transition ON durable_run; DROP FUNCTION record_transition(); "
        "DROP TABLE observed_transition"
    )


def drive_every_transition():
    finished = api.enqueue("tests.noop", {})  # pending -> running -> succeeded
    failing = api.enqueue("tests.always_fails", {})  # running -> pending (retry) ... -> failed
    sleeper = api.enqueue("tests.sleeper", {"seconds": 3600})  # running -> waiting -> running (due)
    waiter = api.enqueue("tests.signal_waiter", {})  # waiting -> pending (signal)
    parent = api.enqueue("tests.parent", {"child": {}})  # waiting -> pending (its child lands)
    run_until_idle()
    for run in (failing, sleeper, failing):
        make_due(run.run_id)
        run_until_idle()
    api.emit_signal(waiter.run_id, "approval", "yes")
    run_until_idle()
    assert {api.get_run(run.run_id).status for run in (finished, sleeper, waiter, parent)} == {"succeeded"}
    assert api.get_run(failing.run_id).status == "failed"

    assert api.cancel(api.enqueue("tests.noop", {}).run_id).value == "cancelled"  # pending -> cancelled
    waiting = api.enqueue("tests.signal_waiter", {})
    run_until_idle()
    assert api.cancel(waiting.run_id).value == "cancelled"  # waiting -> cancelled
    held = api.enqueue("tests.quick_then_done", {})
    [attempt] = _claim_attempts()
    assert api.cancel(held.run_id).value == "requested"
    attempt.request_cancel()
    execute(attempt)  # running -> cancelled, at its next context call
    api.resume(failing.run_id)  # failed -> pending
    api.resume(waiting.run_id)  # cancelled -> pending
    released = claim(limit=10)
    claims.release([(run.run_id, run.attempts) for run in released])  # running -> pending
    [lost] = claim(limit=1)
    make_due(lost.run_id)  # its holder dies
    claim(limit=1)  # running -> running: the reclaim
    late = api.enqueue("tests.noop", {}, delay=3600, deadline=3600)
    asleep = api.enqueue("tests.sleeper", {"seconds": 3600}, deadline=3600)
    run_until_idle()
    for run in (late, asleep):
        pass_deadline(run.run_id)
    run_until_idle()  # pending -> failed, waiting -> failed: their deadlines passed
    assert {api.get_run(run.run_id).status for run in (late, asleep)} == {"failed"}


def _claim_attempts():
    from durable_django.engine import lifecycle

    bounds = lifecycle.claim_bounds(functions=["tests.quick_then_done"], queues=None, tenant_id=None)
    return lifecycle.claim(limit=1, start_now=1, worker_id="t", bounds=bounds)


def test_the_store_makes_exactly_the_allowed_transitions(observed):
    drive_every_transition()
    made = observed()
    allowed = {(before.value, after.value) for before, afters in ALLOWED_TRANSITIONS.items() for after in afters}
    assert made <= allowed, made - allowed
    assert made == allowed, allowed - made  # the table lists no transition the store never makes
