"""The run page's live part and attempts through the test client: its fragment URL, its permission,
a bad ``?attempt=``, and parked runs in the listing."""

import pytest

from durable_django import api
from durable_django.testing import run_until_idle

pytestmark = pytest.mark.django_db(transaction=True)


def page(run_id):
    return f"/admin/durable_django/run/{run_id}/change/"


def live(run_id):
    return f"/admin/durable_django/run/{run_id}/live/"


def test_the_live_fragment_is_the_chart_and_attempts_and_needs_the_view_permission(admin_client, staff_client):
    # Parked after two failed attempts: live (waiting for an operator) however fast its retry came due.
    run = api.enqueue("tests.parks", {"succeed_on": 99})
    run_until_idle()
    assert api.get_run(run.run_id).parked_at is not None
    response = admin_client.get(live(run.run_id))
    assert response.status_code == 200
    body = response.content.decode()
    assert body.lstrip().startswith('<div id="durable-live"') and 'data-live="true"' in body
    assert 'data-outcome="retrying"' in body and "attempt 2 fails on purpose" in body  # the latest failure's
    assert "<html" not in body  # a fragment, not a page
    assert staff_client().get(live(run.run_id)).status_code == 403
    assert staff_client("view_run").get(live(run.run_id)).status_code == 200


@pytest.mark.parametrize("selection", ["99", "x", "-1", "", "1" * 400])
def test_any_attempt_selection_answers_a_page_never_a_500(admin_client, selection):
    run = api.enqueue("tests.always_fails", {})
    run_until_idle()
    for url in (page(run.run_id), live(run.run_id)):
        assert admin_client.get(url, {"attempt": selection}).status_code == 200


def test_the_selected_attempt_is_the_one_asked_for(admin_client):
    run = api.enqueue("tests.flaky", {"succeed_on": 3})
    for _ in range(3):
        run_until_idle()
        from durable_django.testing import make_due

        if api.get_run(run.run_id).status == "pending":
            make_due(run.run_id)
    body = admin_client.get(page(run.run_id), {"attempt": "2"}).content.decode()
    assert "attempt 2 fails on purpose" in body.split('id="durable-attempt-traceback"')[1].split("</pre>")[0]
    assert admin_client.get(live("no-such-run")).status_code in (302, 403, 404)


def test_parked_runs_are_filtered_counted_and_offered_a_resume(admin_client):
    parked = api.enqueue("tests.parks", {"succeed_on": 99})
    other = api.enqueue("tests.noop", {})
    run_until_idle()
    listing = admin_client.get("/admin/durable_django/run/", {"parked": "yes"}).content.decode()
    assert parked.run_id in listing and other.run_id not in listing
    overview = admin_client.get("/admin/durable_django/run/").content.decode()
    assert "durable-overview-parked" in overview
    body = admin_client.get(page(parked.run_id)).content.decode()
    assert f"/admin/durable_django/run/{parked.run_id}/resume/" in body
    assert "parked: waits for an operator" in body and "an operator: parked" in body
