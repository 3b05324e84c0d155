"""ctx.set_progress(): written at once and fenced, not journalled, the latest write wins, kept across attempts."""

import pytest

from durable_django import api
from durable_django.engine import lifecycle
from durable_django.engine.context import MAX_PROGRESS_BYTES, Context
from durable_django.exceptions import InvalidInput, LeaseLost
from durable_django.testing import make_due, run_until_idle
from tests.helpers import sql

pytestmark = pytest.mark.django_db(transaction=True)


def test_progress_is_the_latest_write_kept_across_attempts_and_never_journalled():
    run = api.enqueue("tests.progress", {"steps": 3, "fail_first": True})
    run_until_idle()
    retrying = api.get_run(run.run_id)
    assert retrying.status == "pending" and retrying.failures == 1
    # The failed attempt's report stays until the next one writes.
    assert retrying.progress == {"done": 0, "total": 3}
    make_due(run.run_id)
    run_until_idle()
    done = api.get_run(run.run_id)
    assert done.status == "succeeded" and done.progress == {"done": 3, "total": 3}
    steps = [step_id for (step_id,) in sql("SELECT step_id FROM durable_step WHERE run_id = %s", [run.run_id])]
    assert sorted(steps) == ["v1:work:0", "v1:work:1", "v1:work:2"]


def test_an_async_function_reports_progress():
    run = api.enqueue("tests.async_progress", {"x": 1})
    run_until_idle()
    assert api.get_run(run.run_id).progress == {"stage": "computed", "value": 2}


def test_progress_over_64_kib_is_refused_in_the_handler_and_nothing_is_written():
    run = api.enqueue("tests.oversized_progress", {"chars": MAX_PROGRESS_BYTES})  # with its quotes: 2 bytes over
    run_until_idle()
    done = api.get_run(run.run_id)
    assert "65,538 bytes of JSON; at most 65,536" in done.output["refused"]
    assert done.progress == "small"
    fits = api.enqueue("tests.oversized_progress", {"chars": MAX_PROGRESS_BYTES - 2})
    run_until_idle()
    assert api.get_run(fits.run_id).output == {"refused": None}
    assert len(api.get_run(fits.run_id).progress) == MAX_PROGRESS_BYTES - 2


def claim_one(worker_id):
    bounds = lifecycle.claim_bounds(functions=["tests.slow"], queues=None, tenant_id=None)
    [attempt] = lifecycle.claim(limit=1, start_now=1, worker_id=worker_id, bounds=bounds)
    return attempt


def test_a_stale_holders_progress_is_fenced_off():
    run = api.enqueue("tests.slow", {"seconds": 60})
    stale = claim_one("worker-a")
    Context(stale).set_progress({"by": "a"})
    assert api.get_run(run.run_id).progress == {"by": "a"}
    make_due(run.run_id)  # worker-a's lease runs out; worker-b takes the run over
    current = claim_one("worker-b")
    assert current.token == stale.token + 1
    with pytest.raises(LeaseLost):
        Context(stale).set_progress({"by": "a", "late": True})
    assert api.get_run(run.run_id).progress == {"by": "a"}
    Context(current).set_progress({"by": "b"})
    assert api.get_run(run.run_id).progress == {"by": "b"}
    with pytest.raises(LeaseLost):
        Context(stale).set_progress({"by": "a", "later": True})
    assert api.get_run(run.run_id).progress == {"by": "b"}
    api.cancel(run.run_id)
    make_due(run.run_id)
    run_until_idle()


def test_progress_carries_a_requested_cancel_back_and_refuses_bad_values():
    run = api.enqueue("tests.slow", {"seconds": 60})
    attempt = claim_one("worker-a")
    ctx = Context(attempt)
    with pytest.raises(InvalidInput, match="NUL"):
        ctx.set_progress("a\x00b")
    with pytest.raises(InvalidInput):
        ctx.set_progress({1, 2})
    assert api.cancel(run.run_id) == "requested"
    ctx.set_progress("still working")
    assert attempt.cancel_requested
    assert api.get_run(run.run_id).progress == "still working"
    make_due(run.run_id)
    run_until_idle()
    assert api.get_run(run.run_id).status == "cancelled"
