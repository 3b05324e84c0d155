"""Race batteries for fan-in: a parent that waits for all (or any) of its children, raced against their
landings and against cancels, from real threads released by a barrier; the parent must be woken once,
when its wait is over, and never strand."""

import pytest

from durable_django import CancelOutcome, api
from durable_django.engine import submit_many
from durable_django.store import spawns, waits
from durable_django.submission import RunOptions
from tests.helpers import run_in_threads
from tests.store.factories import claim, complete

pytestmark = pytest.mark.django_db(transaction=True)

ROUNDS = 30


def parent_with_running_children(count):
    """A running parent (held) and its ``count`` running children (held): (parent, [children])."""
    api.enqueue("tests.noop", {"role": "parent"})
    [parent] = claim(limit=1)
    batch = submit_many.batch_request(
        "tests.noop",
        [{"role": "child", "n": n} for n in range(count)],
        RunOptions(),
        key_prefix=f"spawn:{parent.run_id}:v1:spawn:0",
        parent_run_id=parent.run_id,
    )
    ids = spawns.spawn_many(parent.run_id, parent.attempts, "v1:spawn:0", batch)
    children = {run.run_id: run for run in claim(limit=count)}
    assert sorted(children) == sorted(ids)
    return parent, [children[child_id] for child_id in ids]


def wait(parent, children, *, wait_all=True):
    return waits.wait_for_children(
        parent.run_id,
        parent.attempts,
        "v1:gather:0",
        "v1:gather:0#deadline",
        child_run_ids=[child.run_id for child in children],
        wait_all=wait_all,
        timeout_seconds=None,
    )


def finish_round(parent):
    api.cancel(parent.run_id)  # out of the next round's claims


@pytest.mark.parametrize("wait_all", [True, False], ids=["all", "any"])
def test_children_landing_while_their_parent_suspends_on_them_never_strand_it(wait_all):
    for _ in range(ROUNDS):
        parent, children = parent_with_running_children(3)

        def race(index):
            if index == 0:
                return wait(parent, children, wait_all=wait_all)
            return complete(children[index - 1], f'"done-{index - 1}"')

        waited, *landed = run_in_threads(4, race)
        assert landed == ["succeeded"] * 3
        after = api.get_run(parent.run_id)
        if waited.suspended:
            # It suspended before the landings that end its wait: they woke it, once.
            assert (after.status, after.waiting_for, after.attempts) == ("pending", None, parent.attempts), after
        else:
            # It saw its wait over: it resolved at once, and the parent still runs.
            assert after.status == "running"
            if wait_all:
                assert [result["result"] for result in waited.value] == ["done-0", "done-1", "done-2"]
            else:
                index, result = waited.value
                assert result["result"] == f"done-{index}"
        finish_round(parent)


def test_the_last_of_many_concurrent_landings_wakes_the_parent_and_no_earlier_one_does():
    for _ in range(ROUNDS):
        parent, children = parent_with_running_children(6)
        assert wait(parent, children).suspended
        # Five land together; the sixth afterwards.
        run_in_threads(5, lambda index: complete(children[index], "null"))
        still = api.get_run(parent.run_id)
        assert (still.status, still.waiting_for) == ("waiting", "children:all"), still
        assert complete(children[5], "null") == "succeeded"
        woken = api.get_run(parent.run_id)
        assert (woken.status, woken.waiting_for, woken.attempts) == ("pending", None, parent.attempts)
        finish_round(parent)


def test_cancelling_a_parent_that_waits_for_all_while_its_children_land_ends_the_parent():
    for _ in range(ROUNDS):
        parent, children = parent_with_running_children(3)
        assert wait(parent, children).suspended

        def race(index):
            if index == 0:
                return api.cancel(parent.run_id)
            return complete(children[index - 1], "null")

        outcome, *landed = run_in_threads(4, race)
        assert outcome == CancelOutcome.CANCELLED
        assert api.get_run(parent.run_id).status == "cancelled"
        # Running children are only asked to stop, so their completions win either way.
        assert landed == ["succeeded"] * 3


def test_a_timed_out_gather_cancelling_its_stragglers_while_one_lands_is_consistent():
    for _ in range(ROUNDS):
        api.enqueue("tests.noop", {"role": "parent"})
        [parent] = claim(limit=1)
        batch = submit_many.batch_request(
            "tests.noop",
            [{"n": n} for n in range(3)],
            RunOptions(),
            key_prefix=f"spawn:{parent.run_id}:s",
            parent_run_id=parent.run_id,
        )
        ids = spawns.spawn_many(parent.run_id, parent.attempts, "v1:spawn:0", batch)
        # One child runs; two are still pending, so a cancel ends them at once.
        running = claim(limit=1)[0]

        def race(index):
            if index == 0:
                return waits.wait_for_children(
                    parent.run_id,
                    parent.attempts,
                    "v1:gather:0",
                    "v1:gather:0#deadline",
                    child_run_ids=ids,
                    wait_all=True,
                    timeout_seconds=0,
                ).value
            return complete(running, '"in time"')

        results, landed = run_in_threads(2, race)
        by_id = dict(zip(ids, results, strict=True))
        if landed == "succeeded" and by_id[running.run_id]["state"] == "succeeded":
            assert by_id[running.run_id]["result"] == "in time"
        else:
            assert by_id[running.run_id]["state"] == "timeout"
        assert [by_id[child_id]["state"] for child_id in ids if child_id != running.run_id] == ["timeout"] * 2
        assert {api.get_run(child_id).status for child_id in ids if child_id != running.run_id} == {"cancelled"}
        finish_round(parent)
