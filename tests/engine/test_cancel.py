import threading
import uuid

import pytest

from durable_django import CancelOutcome, api
from durable_django.exceptions import InvalidInput, RunNotFound
from durable_django.testing import make_due, run_until_idle
from tests.helpers import run_in_threads, sql
from tests.store.factories import claim, complete
from tests.workflows import effects

pytestmark = pytest.mark.django_db(transaction=True)


def test_cancel_a_pending_run_at_once_and_refuse_a_second_cancel():
    run = api.enqueue("tests.noop", {})
    assert api.cancel(run.run_id) == CancelOutcome.CANCELLED
    cancelled = api.get_run(run.run_id)
    assert cancelled.status == "cancelled" and cancelled.cancel_refused_at is None
    assert api.cancel(run.run_id) == CancelOutcome.REFUSED
    first_refusal = api.get_run(run.run_id).cancel_refused_at
    assert api.cancel(run.run_id) == CancelOutcome.REFUSED
    assert api.get_run(run.run_id).cancel_refused_at == first_refusal  # the first instant is kept
    assert run_until_idle() == 0


def test_cancel_a_finished_run_is_refused_and_changes_nothing_else():
    run = api.enqueue("tests.noop", {"x": 1})
    run_until_idle()
    before = api.get_run(run.run_id)
    assert api.cancel(run.run_id) == CancelOutcome.REFUSED
    after = api.get_run(run.run_id)
    assert after.cancel_refused_at is not None
    assert (after.status, after.output, after.updated_at) == (before.status, before.output, before.updated_at)


def test_cancel_a_running_run_requests_it_and_its_next_context_call_lands_it_cancelled():
    run = api.enqueue("tests.quick_then_done", {})
    [held] = claim()
    assert api.cancel(run.run_id) == CancelOutcome.REQUESTED
    requested = api.get_run(run.run_id)
    assert requested.status == "running" and requested.cancel_requested_at is not None
    # The holder's next write sees it: a step is refused and the attempt lands cancelled.
    from durable_django.engine.attempt import Attempt
    from durable_django.engine.execute import execute
    from durable_django.types import ClaimedRun

    attempt = Attempt(ClaimedRun(run=held, token=held.attempts, journal={}, recovered=False), None)
    attempt.request_cancel()
    assert execute(attempt) == "cancelled"
    assert api.get_run(run.run_id).status == "cancelled"
    assert api.get_run(run.run_id).output is None


def test_a_run_whose_holder_died_is_landed_cancelled_by_recovery_without_its_body(effects_dir):
    run = api.enqueue("tests.two_steps", {})
    claim()
    assert api.cancel(run.run_id) == CancelOutcome.REQUESTED
    make_due(run.run_id)  # its holder dies: the lease expires
    run_until_idle()
    assert api.get_run(run.run_id).status == "cancelled"
    assert effects.count("first") == 0


def test_cancelling_a_parent_cancels_its_whole_tree():
    root = api.enqueue("tests.grandparent", {})
    run_until_idle()
    tree = sql(
        "WITH RECURSIVE t AS (SELECT run_id FROM durable_run WHERE run_id = %s UNION ALL "
        "SELECT c.run_id FROM durable_run c JOIN t ON c.parent_run_id = t.run_id) SELECT run_id FROM t",
        [root.run_id],
    )
    assert len(tree) == 3
    assert {api.get_run(run_id).status for (run_id,) in tree} == {"waiting"}
    assert api.cancel(root.run_id) == CancelOutcome.CANCELLED
    assert {api.get_run(run_id).status for (run_id,) in tree} == {"cancelled"}


def test_a_parent_that_ends_cancels_its_unfinished_descendants():
    # A timeout far beyond the test: the parent is still waiting on its child when it is cancelled.
    parent = api.enqueue("tests.parent", {"child": {"wait_signal": True}, "timeout": 600})
    run_until_idle()
    child_id = api.get_run(parent.run_id).waiting_for.split(":", 1)[1]
    assert api.get_run(child_id).status == "waiting"
    assert api.cancel(parent.run_id) == CancelOutcome.CANCELLED
    assert api.get_run(child_id).status == "cancelled"


def test_a_pivot_step_makes_every_later_cancel_refused_and_the_run_carries_on(effects_dir):
    run = api.enqueue("tests.pivot", {})
    run_until_idle()
    waiting = api.get_run(run.run_id)
    assert waiting.status == "waiting" and waiting.pivoted_at is not None
    assert api.cancel(run.run_id) == CancelOutcome.REFUSED
    assert api.get_run(run.run_id).status == "waiting"
    api.emit_signal(run.run_id, "confirm", True)
    run_until_idle()
    assert api.get_run(run.run_id).status == "succeeded"
    assert effects.count("shipped") == 1


def test_cancel_racing_completion_ends_in_exactly_one_terminal_state():
    for _ in range(50):
        run = api.enqueue("tests.noop", {"v": 1})
        [held] = claim()
        barrier = threading.Barrier(2)

        def racer(index):
            barrier.wait()
            if index == 0:
                return complete(held, '{"v": 1}')
            return api.cancel(run.run_id)

        _completed, outcome = run_in_threads(2, racer)
        final = api.get_run(run.run_id)
        assert not (final.status == "cancelled" and final.output is not None)
        assert not (final.status == "succeeded" and outcome == CancelOutcome.CANCELLED)
        assert final.status == "succeeded"  # a running run is only ever REQUESTED: completion wins
        assert outcome in (CancelOutcome.REQUESTED, CancelOutcome.REFUSED)
    pending_race = []
    for _ in range(50):
        run = api.enqueue("tests.noop", {"v": 2})

        def claim_or_cancel(index):
            if index == 0:
                return claim(limit=1)
            return api.cancel(run.run_id)

        claimed, outcome = run_in_threads(2, claim_or_cancel)
        final = api.get_run(run.run_id)
        if outcome == CancelOutcome.CANCELLED:
            assert final.status == "cancelled" and not claimed
        else:
            assert outcome == CancelOutcome.REQUESTED and final.status == "running"
        pending_race.append(outcome)
        sql("UPDATE durable_run SET status = 'succeeded' WHERE status = 'running'")


def test_cancel_and_resume_are_tenant_scoped():
    tenant, stranger = uuid.uuid4(), uuid.uuid4()
    run = api.enqueue("tests.noop", {}, tenant_id=tenant)
    with pytest.raises(RunNotFound):
        api.cancel(run.run_id, tenant_id=stranger)
    assert api.get_run(run.run_id).status == "pending"
    assert api.cancel(run.run_id, tenant_id=tenant) == CancelOutcome.CANCELLED
    with pytest.raises(RunNotFound):
        api.resume(run.run_id, tenant_id=stranger)
    assert api.resume(run.run_id, tenant_id=tenant).status == "pending"


def test_resume_replays_the_journal_with_a_fresh_budget(effects_dir, settings):
    # The retry an hour away: the default policy's full jitter may make it due within this run_until_idle.
    retry = {**settings.DURABLE.get("DEFAULT_RETRY", {}), "initial_delay": 3600.0, "max_delay": 3600.0, "jitter": 0.0}
    settings.DURABLE = {**settings.DURABLE, "DEFAULT_RETRY": retry}
    run = api.enqueue("tests.falsy_steps", {})
    run_until_idle()  # attempt 1 journals five steps, then fails
    assert api.get_run(run.run_id).status == "pending"
    api.cancel(run.run_id)
    resumed = api.resume(run.run_id)
    assert resumed.status == "pending" and resumed.failures == 0
    run_until_idle()
    assert api.get_run(run.run_id).status == "succeeded"
    assert effects.count("falsy") == 5


def test_resume_refuses_live_and_succeeded_runs():
    run = api.enqueue("tests.noop", {})
    with pytest.raises(InvalidInput):
        api.resume(run.run_id)
    run_until_idle()
    with pytest.raises(InvalidInput):
        api.resume(run.run_id)
    with pytest.raises(RunNotFound):
        api.resume(str(uuid.uuid4()))


def test_resume_refuses_a_child_whose_parent_has_finished_and_resuming_the_parent_works():
    parent = api.enqueue("tests.parent", {"child": {"wait_signal": True}})
    run_until_idle()
    child_id = api.get_run(parent.run_id).waiting_for.split(":", 1)[1]
    assert api.cancel(parent.run_id) == CancelOutcome.CANCELLED  # the child is cancelled with it
    with pytest.raises(InvalidInput, match="which has finished: resume the parent"):
        api.resume(child_id)
    assert api.get_run(child_id).status == "cancelled"
    assert api.resume(parent.run_id).status == "pending"
    assert api.resume(child_id).status == "pending"  # its parent is live again


def test_a_claimed_run_no_slot_started_is_visibly_not_started_and_cancelled_at_once():
    run = api.enqueue("tests.noop", {})
    [held] = claim(started=0)
    assert (held.status, held.attempt_started_at, held.started_at) == ("running", None, None)
    assert api.cancel(run.run_id) == CancelOutcome.CANCELLED
    assert api.get_run(run.run_id).status == "cancelled"


def test_reclaiming_a_dead_workers_runs_counts_a_recovery_only_for_the_one_it_had_started():
    started, waiting = api.enqueue("tests.noop", {"n": 1}), api.enqueue("tests.noop", {"n": 2})
    claim(started=1)
    for run in (started, waiting):
        make_due(run.run_id)  # the worker dies holding both: their leases expire
    reclaimed = {run.run_id: run for run in claim()}
    assert reclaimed[started.run_id].recoveries == 1
    assert reclaimed[waiting.run_id].recoveries == 0


def test_a_parent_that_succeeds_cancels_its_unfinished_children():
    parent = api.enqueue("tests.spawn_and_return", {})
    run_until_idle(functions=["tests.spawn_and_return"])
    done = api.get_run(parent.run_id)
    assert done.status == "succeeded"
    assert api.get_run(done.output).status == "cancelled"  # the landing cascaded, though nobody awaited it


def test_a_cascade_wakes_a_pivoted_waiting_run_whose_child_it_cancels():
    root = api.enqueue("tests.pivot_grandparent", {})
    run_until_idle()
    parent_id = api.get_run(root.run_id).waiting_for.split(":", 1)[1]
    child_id = api.get_run(parent_id).waiting_for.split(":", 1)[1]
    assert api.get_run(parent_id).pivoted_at is not None
    assert api.cancel(root.run_id) == CancelOutcome.CANCELLED
    parent, child = api.get_run(parent_id), api.get_run(child_id)
    assert child.status == "cancelled"
    assert parent.status == "pending" and parent.cancel_refused_at is not None  # refused, and woken
    run_until_idle()
    done = api.get_run(parent_id)
    assert done.status == "succeeded" and done.output["state"] == "cancelled"
