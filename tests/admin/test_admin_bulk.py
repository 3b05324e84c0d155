"""Cancel, resume and retry every run the listing's filters match, as a durable run of the package's own."""

import pytest

from durable_django import api, signals
from durable_django.api.bulk import BULK_FUNCTION, start_bulk
from durable_django.exceptions import InvalidInput
from durable_django.faults import injected
from durable_django.testing import make_due, run_until_idle
from durable_django.types import Run
from tests.admin.test_admin_pages import RUNS, run_url
from tests.helpers import sql

pytestmark = pytest.mark.django_db(transaction=True)

MATCHING = f"{RUNS}?status__exact=pending&function=tests.noop"


def select_all(client, url, action, **extra):
    """Post an action with "select all" checked, as the action bar does (the page's rows checked too)."""
    page = [run.run_id for run in api.list_runs(limit=3).items]
    return client.post(url, {"action": action, "select_across": "1", "index": "0", "_selected_action": page, **extra})


def bulk_runs():
    return sql("SELECT run_id, status FROM durable_run WHERE name = %s", [BULK_FUNCTION])


def test_cancel_every_matching_run_answers_at_once_runs_in_batches_and_a_second_request_joins(staff_client):
    api.enqueue_many("tests.noop", [{"n": n} for n in range(10_000)])
    other = api.enqueue("tests.slow", {"seconds": 0})
    client = staff_client("view_run", "cancel_run")
    confirmation = select_all(client, MATCHING, "cancel_runs")
    assert confirmation.status_code == 200
    assert "every run matching" in confirmation.content.decode() and bulk_runs() == []
    response = select_all(client, MATCHING, "cancel_runs", confirm="yes")
    assert response.status_code == 302
    [(bulk_id, status)] = bulk_runs()
    assert response["Location"] == run_url(bulk_id) and status == "pending"
    again = select_all(client, MATCHING, "cancel_runs", confirm="yes")
    assert again["Location"] == run_url(bulk_id) and len(bulk_runs()) == 1  # joined
    assert sql("SELECT count(*) FROM durable_run WHERE status = 'cancelled'") == [(0,)]  # nothing done yet
    run_until_idle(functions=[BULK_FUNCTION])
    done = api.get_run(bulk_id)
    assert done.status == "succeeded", done.error
    assert done.output == {"operation": "cancel", "runs": 10_000, "outcomes": {"cancelled": 10_000}}
    assert done.progress["runs"] == 10_000 and done.progress["batches"] == 20
    assert sql("SELECT count(*) FROM durable_run WHERE name = 'tests.noop' AND status = 'cancelled'") == [(10_000,)]
    assert api.get_run(other.run_id).status == "pending"
    page = client.get(run_url(bulk_id)).content.decode()
    assert "&quot;runs&quot;: 10000" in page or '"runs": 10000' in page
    # The same request after it finished starts a new run.
    select_all(client, MATCHING, "cancel_runs", confirm="yes")
    assert len(bulk_runs()) == 2


@pytest.mark.parametrize(("point", "made_before_the_redo"), [("bulk.acted", 500), ("bulk.committed", 1_000)])
def test_a_retry_of_every_match_redone_after_a_crash_mid_batch_makes_one_new_run_per_match(point, made_before_the_redo):
    runs = api.enqueue_many("tests.noop", [{"n": n} for n in range(1_200)])
    sql("UPDATE durable_run SET status = 'failed', finished_at = now() WHERE name = 'tests.noop'")
    bulk = start_bulk("retry", {"name": "tests.noop", "status": "failed"})
    batches = []

    def crash_from_the_second_batch_on():
        # Every batch from the second on crashes while this is injected: the bulk run's retry has full jitter,
        # so it may come due (and redo the second batch) before run_until_idle returns; it crashes there too.
        batches.append(1)
        if len(batches) >= 2:
            raise RuntimeError("the worker dies mid-batch")

    with injected(point, crash_from_the_second_batch_on):
        run_until_idle(functions=[BULK_FUNCTION])
    assert api.get_run(bulk.run_id).failures >= 1
    # Before its commit the batch's transaction rolls back whole; after it, the step is not journalled.
    made = "SELECT count(*) FROM durable_run WHERE name = 'tests.noop' AND status = 'pending'"
    assert sql(made) == [(made_before_the_redo,)]
    make_due(bulk.run_id)
    run_until_idle(functions=[BULK_FUNCTION])
    done = api.get_run(bulk.run_id)
    assert done.status == "succeeded"
    assert done.output == {"operation": "retry", "runs": 1_200, "outcomes": {"retried": 1_200}}
    assert sql(made) == [(1_200,)]
    assert len(runs) == 1_200


def test_a_cancel_of_every_match_crashed_inside_a_batch_cancels_each_run_once_and_counts_it_once():
    api.enqueue_many("tests.noop", [{"n": n} for n in range(1_200)])
    bulk = start_bulk("cancel", {"name": "tests.noop", "status": "pending"})
    finished = []

    def heard(sender, run, **kwargs):
        if run.name == "tests.noop":
            finished.append(run.run_id)

    def crash_in_the_second_batch():
        if len(set(finished)) == 500:
            raise RuntimeError("the worker dies mid-batch")

    signals.run_finished.connect(heard, sender=Run)
    try:
        with injected("bulk.acted", crash_in_the_second_batch):
            run_until_idle(functions=[BULK_FUNCTION])
        cancelled = "SELECT count(*) FROM durable_run WHERE name = 'tests.noop' AND status = 'cancelled'"
        assert sql(cancelled) == [(500,)] and len(finished) == 500  # the second batch rolled back, signals too
        make_due(bulk.run_id)
        run_until_idle(functions=[BULK_FUNCTION])
    finally:
        signals.run_finished.disconnect(heard, sender=Run)
    done = api.get_run(bulk.run_id)
    assert done.output == {"operation": "cancel", "runs": 1_200, "outcomes": {"cancelled": 1_200}}
    assert sql(cancelled) == [(1_200,)]
    assert len(finished) == len(set(finished)) == 1_200  # run_finished once per run cancelled


def test_filters_a_bulk_operation_cannot_express_are_refused_with_a_message_and_nothing_started(staff_client):
    client = staff_client("view_run", "cancel_run", "retry_run")
    api.enqueue("tests.noop", {})
    for url in (
        f"{RUNS}?held_by=any",
        f"{RUNS}?q=some-key",
        f"{RUNS}?q=input.=1",
        f"{RUNS}?tenant=none",
    ):
        response = select_all(client, url, "retry_runs", confirm="yes")
        assert response.status_code == 302, url  # back to the listing, with the message
    assert bulk_runs() == []
    with pytest.raises(InvalidInput):
        start_bulk("delete", {})
    with pytest.raises(InvalidInput):
        start_bulk("cancel", {"status": "nope"})
    with pytest.raises(InvalidInput):
        start_bulk("cancel", {"created_at": "x"})
    assert bulk_runs() == []


def test_resume_every_parked_run_resumes_the_parked_ones_and_nothing_else(staff_client):
    parked = [api.enqueue("tests.parks", {"succeed_on": 99, "n": n}) for n in range(3)]
    cancelled = api.enqueue("tests.noop", {"kept": "cancelled"})
    api.cancel(cancelled.run_id)
    sleeping = api.enqueue("tests.sleeper", {"seconds": 3600})
    run_until_idle()
    assert {api.get_run(run.run_id).parked_at is not None for run in parked} == {True}
    assert (api.get_run(cancelled.run_id).status, api.get_run(sleeping.run_id).status) == ("cancelled", "waiting")
    client = staff_client("view_run", "retry_run")
    response = select_all(client, f"{RUNS}?parked=yes", "resume_runs", confirm="yes")
    assert response.status_code == 302
    [(bulk_id, _)] = bulk_runs()
    assert api.get_run(bulk_id).input["filters"] == {"parked": True}
    run_until_idle(functions=[BULK_FUNCTION])
    assert api.get_run(bulk_id).output == {"operation": "resume", "runs": 3, "outcomes": {"resumed": 3}}
    for run in parked:
        resumed = api.get_run(run.run_id)
        assert (resumed.status, resumed.parked_at, resumed.failures) == ("pending", None, 0)
    # A cancelled run (resumable, not parked) and a sleeper (waiting, not parked) are not matched.
    assert (api.get_run(cancelled.run_id).status, api.get_run(sleeping.run_id).status) == ("cancelled", "waiting")
    with pytest.raises(InvalidInput):
        start_bulk("resume", {"parked": "yes"})
    # Not filtering by parked is the same operation as no parked filter: the same key, joined.
    assert start_bulk("cancel", {"parked": False}).run_id == start_bulk("cancel", {}).run_id


def test_every_match_needs_the_operations_own_permission(staff_client):
    api.enqueue("tests.noop", {})
    viewer = staff_client("view_run")
    response = select_all(viewer, MATCHING, "cancel_runs", confirm="yes")
    assert response.status_code in (200, 302)
    assert bulk_runs() == []
    retrier = staff_client("view_run", "retry_run")
    select_all(retrier, MATCHING, "cancel_runs", confirm="yes")
    assert bulk_runs() == []
