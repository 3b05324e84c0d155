"""Fan-out and fan-in with real worker processes, one of them SIGKILLed in the middle."""

import signal

import pytest

from durable_django import api
from tests.helpers import sql, wait_until
from tests.workflows import effects

pytestmark = [pytest.mark.process, pytest.mark.django_db(transaction=True)]

SHORT_LEASE = {"DURABLE_TEST_LEASE_SECONDS": "2"}
CHILDREN = 1000


def succeeded_children(parent_run_id):
    [(count,)] = sql(
        "SELECT count(*) FROM durable_run WHERE parent_run_id = %s AND status = 'succeeded'", [parent_run_id]
    )
    return count


@pytest.mark.long
def test_a_thousand_children_gathered_under_a_sigkill_are_a_thousand_in_order_and_wake_the_parent_once(workers):
    parent = api.enqueue("tests.fan_out", {"children": [{"value": n, "pause": 0.01} for n in range(CHILDREN)]})
    doomed = workers.start("--concurrency", "4", **SHORT_LEASE)
    wait_until(lambda: api.get_run(parent.run_id).status == "waiting", timeout=60, message="the parent to fan out")
    waiting = api.get_run(parent.run_id)
    assert waiting.waiting_for == "children:all"
    survivor = workers.start("--concurrency", "4", **SHORT_LEASE)
    wait_until(lambda: succeeded_children(parent.run_id) >= CHILDREN // 4, timeout=120, message="children to land")
    doomed.send_signal(signal.SIGKILL)
    doomed.wait(timeout=10)
    assert succeeded_children(parent.run_id) < CHILDREN, "the kill came too late to be in the middle"
    assert api.get_run(parent.run_id).status == "waiting"
    wait_until(lambda: api.get_run(parent.run_id).status == "succeeded", timeout=300, message="the gather")
    done = api.get_run(parent.run_id)
    assert sql("SELECT count(*) FROM durable_run WHERE parent_run_id = %s", [parent.run_id]) == [(CHILDREN,)]
    assert len(done.output["ids"]) == len(set(done.output["ids"])) == CHILDREN
    assert [result["result"]["value"] for result in done.output["results"]] == list(range(CHILDREN))
    assert {result["state"] for result in done.output["results"]} == {"succeeded"}
    # Claimed once after its children were done: the attempt that gathered their results.
    assert done.attempts == waiting.attempts + 1
    assert effects.count("fanned-out") == done.attempts  # each attempt replayed the spawn; none spawned again
    assert effects.count("child-ran") >= CHILDREN
    assert survivor.poll() is None
