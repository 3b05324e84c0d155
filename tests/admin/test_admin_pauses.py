"""The pauses page and the runs list's pause actions, through Django's test client, with their permissions."""

import pytest

from durable_django import api
from tests.admin.test_admin_pages import RUNS, bulk, confirm_bulk

pytestmark = pytest.mark.django_db(transaction=True)

PAUSES = "/admin/durable_django/pause/"


def test_an_operator_pauses_a_function_on_the_page_sees_it_listed_and_unpauses_it(staff_client):
    client = staff_client("view_pause", "pause_run")
    response = client.post(f"{PAUSES}add/", {"function": "tests.noop", "queue": "", "reason": "bad deploy"})
    assert response.status_code == 302, response.content.decode()[:2000]
    [pause] = api.list_pauses()
    assert (pause.function, pause.queue, pause.reason) == ("tests.noop", None, "bad deploy")
    listing = client.get(PAUSES)
    assert listing.status_code == 200 and "paused:function:tests.noop" in listing.content.decode()
    response = client.post(PAUSES, {"action": "unpause_selected", "_selected_action": [pause.key], "index": "0"})
    assert response.status_code == 302
    assert api.list_pauses() == []


@pytest.mark.parametrize(
    "form",
    [
        {"function": "", "queue": "", "reason": ""},
        {"function": "a", "queue": "b", "reason": ""},
        {"function": "a\x00b", "queue": "", "reason": ""},
    ],
)
def test_a_bad_pause_form_answers_a_form_error_and_writes_nothing(staff_client, form):
    response = staff_client("view_pause", "pause_run").post(f"{PAUSES}add/", form)
    assert response.status_code == 200
    assert response.context["adminform"].form.errors
    assert api.list_pauses() == []


def test_pausing_and_unpausing_need_the_pause_permission(staff_client):
    viewer = staff_client("view_pause", "view_run")
    assert viewer.get(PAUSES).status_code == 200
    assert viewer.post(f"{PAUSES}add/", {"function": "tests.noop", "queue": "", "reason": ""}).status_code == 403
    run = api.enqueue("tests.noop", {})
    response = confirm_bulk(viewer, "pause_function_runs", [run.run_id])
    assert api.list_pauses() == []
    api.pause(queue="mail")
    response = viewer.post(PAUSES, {"action": "unpause_selected", "_selected_action": ["paused:queue:mail"]})
    assert response.status_code in (200, 302)
    assert [pause.key for pause in api.list_pauses()] == ["paused:queue:mail"]


def test_the_runs_list_pauses_the_selected_runs_functions_and_queues(staff_client):
    client = staff_client("view_run", "pause_run")
    runs = [api.enqueue("tests.noop", {"n": 1}), api.enqueue("tests.slow", {"seconds": 0}, queue="mail")]
    confirmation = bulk(client, "pause_function_runs", [run.run_id for run in runs])
    assert confirmation.status_code == 200 and "are you sure" in confirmation.content.decode()
    assert api.list_pauses() == []
    response = confirm_bulk(client, "pause_function_runs", [run.run_id for run in runs])
    assert response.status_code == 200
    assert {pause.key for pause in api.list_pauses()} == {"paused:function:tests.noop", "paused:function:tests.slow"}
    confirm_bulk(client, "pause_queue_runs", [runs[1].run_id])
    assert "paused:queue:mail" in {pause.key for pause in api.list_pauses()}
    assert client.get(RUNS).status_code == 200
