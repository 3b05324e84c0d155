"""Race batteries: two transitions on one run, or on a parent and its child, from real threads released
by a barrier, many times; every outcome must be one the contract allows, and no run may strand.
"""

import threading
from datetime import timedelta

import pytest
from django.db import connections, transaction

from durable_django import CancelOutcome, api
from durable_django.engine import submit
from durable_django.exceptions import RunNotFound
from durable_django.store import journal, spawns, waits
from durable_django.submission import RunOptions
from tests.helpers import run_in_threads, sql
from tests.store.factories import claim, complete, fail

pytestmark = pytest.mark.django_db(transaction=True)

ROUNDS = 60


def parent_with_running_child():
    """A running parent (held as a worker holds it) and its running child: (parent, child) Run records."""
    api.enqueue("tests.noop", {"role": "parent"})
    [parent] = claim(limit=1)
    params = submit.request("tests.noop", {"role": "child"}, RunOptions(), parent_run_id=parent.run_id)
    params = params.with_engine_key(f"spawn:{parent.run_id}:s")
    child_id = spawns.spawn(parent.run_id, parent.attempts, "v1:spawn:0", params)
    [child] = claim(limit=1)
    assert child.run_id == child_id
    return parent, child


def wait_for(parent, child):
    return waits.wait_for_child(
        parent.run_id,
        parent.attempts,
        "v1:wait:0",
        "v1:wait:0#deadline",
        child_run_id=child.run_id,
        timeout_seconds=None,
    )


def test_a_child_landing_while_its_parent_suspends_on_it_never_strands_the_parent():
    for _ in range(ROUNDS):
        parent, child = parent_with_running_child()
        waited, landed = run_in_threads(2, lambda i: wait_for(parent, child) if i == 0 else complete(child, '"done"'))
        assert landed == "succeeded"
        after = api.get_run(parent.run_id)
        if waited.suspended:
            # It suspended before the child landed: the landing must have woken it.
            assert after.status == "pending" and after.waiting_for is None, after
        else:
            # It saw the child landed: the wait resolved at once, and the parent still runs.
            assert waited.value == {"state": "succeeded", "result": "done", "error": None}
            assert after.status == "running"
        api.cancel(parent.run_id)  # out of the next round's claims


def test_cancelling_a_waiting_parent_while_its_child_lands_never_fails_and_ends_the_parent():
    for _ in range(ROUNDS):
        parent, child = parent_with_running_child()
        assert wait_for(parent, child).suspended
        outcome, landed = run_in_threads(
            2, lambda i: api.cancel(parent.run_id) if i == 0 else complete(child, '"done"')
        )
        assert outcome == CancelOutcome.CANCELLED
        assert api.get_run(parent.run_id).status == "cancelled"
        # A running child is only asked to stop, so its completion wins either way.
        assert landed == "succeeded" and api.get_run(child.run_id).status == "succeeded"


def test_cancelling_a_child_while_it_lands_wakes_its_waiting_parent_either_way():
    for _ in range(ROUNDS):
        parent, child = parent_with_running_child()
        assert wait_for(parent, child).suspended
        outcome, landed = run_in_threads(2, lambda i: api.cancel(child.run_id) if i == 0 else complete(child, '"done"'))
        assert outcome in (CancelOutcome.REQUESTED, CancelOutcome.REFUSED)
        assert landed == "succeeded"
        woken = api.get_run(parent.run_id)
        assert woken.status == "pending" and woken.waiting_for is None
        api.cancel(parent.run_id)  # out of the next round's claims


def test_a_signal_emitted_while_its_run_suspends_on_it_is_never_lost():
    for round_ in range(ROUNDS):
        api.enqueue("tests.noop", {"round": round_})
        [run] = claim(limit=1)

        def race(index):
            if index == 0:
                return waits.wait_for_signal(
                    run.run_id,
                    run.attempts,
                    "v1:wait:0",
                    "v1:wait:0#deadline",
                    signal="go",
                    occurrence=0,
                    timeout_seconds=None,
                    default=None,
                )
            return api.emit_signal(run.run_id, "go", {"round": round_})

        waited, stored = run_in_threads(2, race)
        assert stored == {"round": round_}
        after = api.get_run(run.run_id)
        if waited.suspended:
            assert after.status == "pending", after
        else:
            assert waited.value == stored and after.status == "running"
        api.cancel(run.run_id)  # out of the next round's claims


def finished_tree_ready_to_purge():
    """A finished run whose landing is two days old."""
    run = api.enqueue("tests.noop", {})
    [held] = claim(limit=1)
    complete(held, "null")
    sql("UPDATE durable_run SET updated_at = now() - interval '2 days' WHERE run_id = %s", [run.run_id])
    return run


def orphan_signals() -> int:
    [(count,)] = sql(
        "SELECT count(*) FROM durable_signal s WHERE NOT EXISTS (SELECT 1 FROM durable_run r WHERE r.run_id = s.run_id)"
    )
    return count


def test_a_signal_emitted_to_a_finished_run_while_it_is_purged_never_outlives_its_run():
    for _ in range(ROUNDS):
        run = finished_tree_ready_to_purge()

        def race(index):
            if index == 0:
                return api.purge_finished(older_than=timedelta(days=1))
            try:
                return api.emit_signal(run.run_id, "late", "value")
            except RunNotFound:
                return None

        run_in_threads(2, race)
        assert orphan_signals() == 0


def test_a_purge_while_an_emit_holds_the_run_leaves_run_and_signal_together():
    run = finished_tree_ready_to_purge()
    emitted, release, purged = threading.Event(), threading.Event(), []

    def emit_and_hold():
        try:
            with transaction.atomic():
                api.emit_signal(run.run_id, "late", "value")
                emitted.set()
                release.wait(30)
        finally:
            connections.close_all()

    holder = threading.Thread(target=emit_and_hold)
    holder.start()
    assert emitted.wait(30)

    def purge():
        try:
            purged.append(api.purge_finished(older_than=timedelta(days=1)))
        finally:
            connections.close_all()

    purger = threading.Thread(target=purge)
    purger.start()
    purger.join(1.0)  # a purge that waited for the run's lock would still be waiting here
    release.set()
    holder.join(30)
    purger.join(30)
    assert orphan_signals() == 0
    remaining = sql("SELECT count(*) FROM durable_run WHERE run_id = %s", [run.run_id])[0][0]
    assert purged == [1 - remaining]
    assert api.purge_finished(older_than=timedelta(days=1)) == remaining
    assert orphan_signals() == 0 and sql("SELECT count(*) FROM durable_signal") == [(0,)]


def failed_run_with_a_step_ready_to_purge():
    """A run that journalled a step and failed for good, its landing two days old."""
    run = api.enqueue("tests.noop", {})
    [held] = claim(limit=1)
    journal.record_step(held.run_id, held.attempts, "v1:step:0", '"kept"', pivot=False)
    fail(held, final=True, error="boom", error_type="builtins.ValueError", delay=0)
    sql("UPDATE durable_run SET updated_at = now() - interval '2 days' WHERE run_id = %s", [run.run_id])
    return run


def test_a_resume_racing_a_purge_keeps_the_run_with_its_journal_or_neither():
    for _ in range(ROUNDS):
        run = failed_run_with_a_step_ready_to_purge()

        def race(index):
            if index == 0:
                return api.purge_finished(older_than=timedelta(days=1))
            try:
                return api.resume(run.run_id)
            except RunNotFound:
                return None

        purged, resumed = run_in_threads(2, race)
        steps = sql("SELECT result::text FROM durable_step WHERE run_id = %s", [run.run_id])
        if resumed is not None:
            # The resume won: the purge must have left the run and its journal alone.
            assert purged == 0 and api.get_run(run.run_id).status == "pending"
            assert steps == [('"kept"',)]
            api.cancel(run.run_id)  # out of the next round's purge
            sql("UPDATE durable_run SET updated_at = now() - interval '2 days' WHERE run_id = %s", [run.run_id])
            assert api.purge_finished(older_than=timedelta(days=1)) == 1
        else:
            assert purged == 1 and api.get_run(run.run_id) is None and steps == []


def test_a_cancel_racing_a_claim_either_cancels_the_run_unclaimed_or_requests_the_claimed_one():
    for _ in range(ROUNDS):
        run = api.enqueue("tests.noop", {})

        def race(index):
            return claim(limit=1) if index == 0 else api.cancel(run.run_id)

        claimed, outcome = run_in_threads(2, race)
        after = api.get_run(run.run_id)
        if claimed:
            # Claimed (and started) first: the cancel is a request its next context call obeys.
            assert outcome == CancelOutcome.REQUESTED, outcome
            assert after.status == "running" and after.cancel_requested_at is not None
            complete(claimed[0], "null")  # its holder lands it; the next round starts clean
        else:
            assert outcome == CancelOutcome.CANCELLED and after.status == "cancelled"
