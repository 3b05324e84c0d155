"""Fan-out and fan-in: ctx.spawn_many, ctx.wait_for_all and ctx.wait_for_any."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from durable_django import api, faults
from durable_django.exceptions import InvalidInput
from durable_django.journal_ids import WaitingFor
from durable_django.store import journal, spawns
from durable_django.store.sessions import listening
from durable_django.testing import make_due, run_until_idle
from tests.helpers import sql
from tests.store.factories import claim
from tests.workflows import effects

pytestmark = pytest.mark.django_db(transaction=True)


def children_of(run_id):
    return [row[0] for row in sql("SELECT run_id FROM durable_run WHERE parent_run_id = %s", [run_id])]


def spawned(parent):
    """The children's ids as the parent's spawn_many journalled them, in input order."""
    return journal.load_journal([parent.run_id])[parent.run_id]["v1:spawn:0"]


def signal_children(ids, *indexes):
    for index in indexes:
        api.emit_signal(ids[index], "go", None)


def test_the_parent_gathers_its_children_in_order_and_is_claimed_once_after_the_last_lands():
    parent = api.enqueue("tests.fan_out", {"children": [{"value": n, "wait_signal": True} for n in range(5)]})
    run_until_idle()
    waiting = api.get_run(parent.run_id)
    assert (waiting.status, waiting.waiting_for, waiting.attempts) == ("waiting", "children:all", 1)
    ids = spawned(parent)
    assert sorted(ids) == sorted(children_of(parent.run_id)) and len(ids) == 5
    # The children land in an order of their own; the parent sleeps through all but the last landing.
    for index in (3, 0, 4, 1):
        signal_children(ids, index)
        run_until_idle()
        assert api.get_run(parent.run_id).status == "waiting"
    signal_children(ids, 2)
    run_until_idle()
    done = api.get_run(parent.run_id)
    assert done.status == "succeeded", done.error
    assert done.attempts == 2  # claimed once to spawn and wait, once after the last child landed
    assert done.output["ids"] == ids
    assert [result["result"]["value"] for result in done.output["results"]] == [0, 1, 2, 3, 4]
    assert {result["state"] for result in done.output["results"]} == {"succeeded"}


def test_spawn_many_is_one_statement_and_one_notify():
    api.enqueue("tests.noop", {})
    [held] = claim(limit=1)
    with listening(["durable_wake"]) as listener, CaptureQueriesContext(connection) as queries:
        spawns.spawn_many(held.run_id, held.attempts, "v1:spawn:0", _batch(held, 200))
        heard = list(listener.notifies(timeout=0.5))
    inserts = [query["sql"] for query in queries.captured_queries if "INSERT INTO durable_run" in query["sql"]]
    assert len(inserts) == 1
    assert [(n.channel, n.payload) for n in heard] == [("durable_wake", "default")]
    assert len(children_of(held.run_id)) == 200


def _batch(held, count):
    from durable_django.engine import submit_many
    from durable_django.submission import RunOptions

    return submit_many.batch_request(
        "tests.child",
        [{"value": n} for n in range(count)],
        RunOptions(),
        key_prefix=f"spawn:{held.run_id}:v1:spawn:0",
        parent_run_id=held.run_id,
    )


def test_a_replay_returns_the_same_children_and_spawns_none_more():
    parent = api.enqueue("tests.fan_out", {"n": 20, "fail_once": True})
    run_until_idle(functions=["tests.fan_out"])  # attempt 1 spawns, then fails on purpose
    first = children_of(parent.run_id)
    make_due(parent.run_id)
    run_until_idle()
    done = api.get_run(parent.run_id)
    assert done.status == "succeeded", done.error
    assert sorted(done.output["ids"]) == sorted(first) and len(first) == 20
    assert len(children_of(parent.run_id)) == 20
    assert effects.count("fanned-out") == 3  # attempt 1, the retry, and the wake-up after the children


def test_a_crash_between_inserting_the_children_and_journalling_them_leaves_no_child():
    parent = api.enqueue("tests.fan_out", {"n": 10})

    def crash():
        raise RuntimeError("the worker dies after the insert")

    with faults.injected("spawn_many.inserted", crash):
        run_until_idle(functions=["tests.fan_out"])
    failed_once = api.get_run(parent.run_id)
    # Once, or again when its short retry delay ran out before the drain ended: each crash leaves no child.
    assert failed_once.failures >= 1 and "the worker dies after the insert" in failed_once.error
    assert children_of(parent.run_id) == []
    make_due(parent.run_id)
    run_until_idle()
    done = api.get_run(parent.run_id)
    assert done.status == "succeeded" and len(done.output["ids"]) == 10
    assert sorted(children_of(parent.run_id)) == sorted(done.output["ids"])


def test_wait_for_any_returns_the_first_child_to_finish_and_leaves_the_others_running():
    children = [{"value": n, "wait_signal": True} for n in range(4)]
    parent = api.enqueue("tests.race_children", {"children": children, "hold": True})
    run_until_idle()
    assert api.get_run(parent.run_id).waiting_for == "children:any"
    ids = spawned(parent)
    signal_children(ids, 2)
    run_until_idle()
    held = api.get_run(parent.run_id)
    assert (held.status, held.waiting_for, held.attempts) == ("waiting", "signal:done:0", 2)
    # The others were not touched by the wait: they still wait for their signal.
    assert [api.get_run(ids[n]).status for n in (0, 1, 3)] == ["waiting"] * 3
    signal_children(ids, 0, 1)  # later finishers change nothing in the journalled answer
    run_until_idle()
    api.emit_signal(parent.run_id, "done")
    run_until_idle()
    done = api.get_run(parent.run_id)
    assert done.status == "succeeded", done.error
    assert done.output["first"] == [2, {"state": "succeeded", "result": {"child_of": None, "value": 2}, "error": None}]
    # Woken by the first child to finish, then by the signal: the later finishers woke nothing.
    assert effects.count("raced") == 2 and done.attempts == 3


def test_wait_for_any_among_several_finished_returns_the_earliest():
    children = [{"value": n, "wait_signal": True} for n in range(3)]
    parent = api.enqueue("tests.race_children", {"children": children})
    run_until_idle(functions=["tests.race_children"])  # the parent spawns, nothing runs the children yet
    ids = children_of(parent.run_id)
    ordered = spawned(parent)
    assert sorted(ordered) == sorted(ids)
    run_until_idle(functions=["tests.child"])
    signal_children(ordered, 1)
    run_until_idle(functions=["tests.child"])
    signal_children(ordered, 0)
    run_until_idle(functions=["tests.child"])
    run_until_idle()
    assert api.get_run(parent.run_id).output["first"][0] == 1


def test_wait_for_any_times_out_with_none_and_cancels_nothing():
    children = [{"value": n, "wait_signal": True} for n in range(2)]
    parent = api.enqueue("tests.race_children", {"children": children, "timeout": 3600, "hold": True})
    run_until_idle()
    make_due(parent.run_id)
    run_until_idle()
    held = api.get_run(parent.run_id)
    assert held.waiting_for == "signal:done:0"
    assert journal.load_journal([parent.run_id])[parent.run_id]["v1:race:0"] is None
    assert {api.get_run(child).status for child in children_of(parent.run_id)} == {"waiting"}


def test_wait_for_all_with_a_timeout_cancels_the_stragglers_and_reports_them_as_timeout():
    children = [{"value": n, "wait_signal": True} for n in range(3)]
    parent = api.enqueue("tests.fan_out", {"children": children, "timeout": 3600})
    run_until_idle()
    ids = spawned(parent)
    signal_children(ids, 1)
    run_until_idle()
    assert api.get_run(parent.run_id).status == "waiting"
    make_due(parent.run_id)  # the hour passes
    run_until_idle()
    done = api.get_run(parent.run_id)
    assert done.status == "succeeded", done.error
    timeout = {"state": "timeout", "result": None, "error": None}
    assert done.output["results"] == [
        timeout,
        {"state": "succeeded", "result": {"child_of": None, "value": 1}, "error": None},
        timeout,
    ]
    assert [api.get_run(child).status for child in ids] == ["cancelled", "succeeded", "cancelled"]


def test_wait_for_all_of_children_already_landed_resolves_at_once():
    parent = api.enqueue("tests.fan_out", {"n": 3})
    run_until_idle(functions=["tests.fan_out"])
    run_until_idle(functions=["tests.child"])  # the children land while the parent waits
    run_until_idle()
    assert api.get_run(parent.run_id).attempts == 2


def test_async_handlers_spawn_many_and_wait_for_any_and_all():
    parent = api.enqueue("tests.async_fan_out", {"n": 4})
    run_until_idle()
    done = api.get_run(parent.run_id)
    assert done.status == "succeeded", done.error
    assert done.output["values"] == [0, 1, 2, 3] and len(set(done.output["ids"])) == 4
    index, result = done.output["first"]
    assert result["result"]["value"] == index


def test_waiting_for_a_run_that_is_not_a_child_is_refused():
    stranger = api.enqueue("tests.noop", {})
    for wait_any in (False, True):
        run = api.enqueue("tests.gather_given", {"ids": [stranger.run_id], "any": wait_any})
        run_until_idle(functions=["tests.gather_given"])
        failed = api.get_run(run.run_id)
        assert failed.error_type == "durable_django.exceptions.NotAChild", failed.error


@pytest.mark.parametrize(
    "options, message",
    [
        ({"idempotency_key": "k"}, "idempotency_key"),
        ({"coalesce_key": "k"}, "coalesce_key"),
        ({"idempotency_keys": ["k"]}, "idempotency_keys"),
        ({"tenant_id": None}, "tenant_id"),
    ],
)
def test_spawn_many_refuses_the_keys_that_identify_the_children(options, message):
    parent = api.enqueue("tests.fan_out", {"n": 1, "options": options})
    run_until_idle()
    failed = api.get_run(parent.run_id)
    assert failed.error_type == "durable_django.exceptions.InvalidInput" and message in failed.error
    assert children_of(parent.run_id) == []


def test_an_empty_fan_out_spawns_nothing_and_gathers_nothing():
    parent = api.enqueue("tests.fan_out", {"n": 0})
    run_until_idle()
    done = api.get_run(parent.run_id)
    assert done.output == {"ids": [], "results": []} and done.attempts == 1


def test_children_waits_encode_and_parse():
    for wait_all in (True, False):
        wait = WaitingFor.children(wait_all=wait_all)
        assert WaitingFor.parse(str(wait)) == wait
    with pytest.raises(ValueError):
        WaitingFor.parse("children:some")


def test_wait_for_any_needs_a_child_and_a_list():
    from durable_django.engine.child_calls import _child_ids

    with pytest.raises(InvalidInput, match="list of run ids"):
        _child_ids("one-id")


def test_a_cascade_that_ends_the_children_of_a_pivoted_gatherer_wakes_it():
    top = api.enqueue("tests.spawn_one", {"function": "tests.pivot_gatherer", "input": {"n": 3}})
    run_until_idle()
    [gatherer] = children_of(top.run_id)
    assert api.get_run(gatherer).waiting_for == "children:all"
    assert api.cancel(top.run_id) == "cancelled"
    # The gatherer is past its pivot: it refuses the cancel and carries on, but its children were cancelled.
    assert api.get_run(gatherer).status == "pending"
    run_until_idle()
    done = api.get_run(gatherer)
    assert done.status == "succeeded", done.error
    assert [result["state"] for result in done.output] == ["cancelled"] * 3


@pytest.mark.parametrize("function", ["tests.fan_out", "tests.race_children"], ids=["all", "any"])
def test_a_child_that_succeeds_on_a_retry_reports_no_error_to_a_parent_gathering_it(function):
    """As with ``wait_for_result``: the child keeps its last failure for the operator, not for its parent."""
    parent = api.enqueue(function, {"children": [{"value": 7, "fail_first": True}]})
    for _ in range(20):  # the child's retry waits for its backoff
        if api.get_run(parent.run_id).status == "succeeded":
            break
        for pending in api.list_runs(status="pending").items:
            make_due(pending.run_id)
        run_until_idle()
    done = api.get_run(parent.run_id)
    assert done.status == "succeeded", done.error
    [(child_error,)] = sql("SELECT error FROM durable_run WHERE parent_run_id = %s", [parent.run_id])
    assert child_error  # the child itself keeps the failure it recovered from
    outcome = {"state": "succeeded", "result": {"child_of": None, "value": 7}, "error": None}
    gathered = done.output["results"] if function == "tests.fan_out" else [done.output["first"][1]]
    assert gathered == [outcome], done.output
