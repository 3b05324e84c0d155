"""The admin says why a due run is not running: which limit holds it, how many that limit holds and runs."""

import pytest
from django.conf import settings
from django.test import override_settings
from django.urls import reverse

from durable_django import api
from durable_django.testing import claim
from tests.workflows import tasks

pytestmark = pytest.mark.django_db(transaction=True)

HOT = "concurrency:tests.limited:hot"


@pytest.fixture
def held_runs():
    """One run of the key "hot" running, three more it holds back, and one run of another key running."""
    hot = [api.enqueue("tests.limited", {"key": "hot", "n": n}) for n in range(4)]
    cold = api.enqueue("tests.limited", {"key": "cold"})
    claimed = {run.run_id for run in claim(limit=10)}
    assert claimed == {hot[0].run_id, cold.run_id}
    return hot, cold


def listing(client, **query):
    response = client.get(reverse("admin:durable_django_run_changelist"), query)
    assert response.status_code == 200
    return response


def listed(response):
    return {run.run_id for run in response.context["cl"].result_list}


def test_the_listing_shows_which_limit_holds_each_run_and_filters_by_it(held_runs, admin_client):
    hot, _ = held_runs
    response = listing(admin_client)
    html = response.content.decode()
    cells = [cell.split("</td>")[0] for cell in html.split('class="field-now">')[1:]]
    assert len(cells) == 5 and sum("held by <a href=" in cell and f">{HOT}</a>" in cell for cell in cells) == 3
    assert listed(listing(admin_client, held_by="any")) == {run.run_id for run in hot[1:]}
    assert listed(listing(admin_client, held_by=HOT)) == {run.run_id for run in hot[1:]}
    assert listed(listing(admin_client, held_by="concurrency:tests.limited:cold")) == set()
    # The filter offers "any limit" and the keys holding runs.
    [choices] = [spec for spec in response.context["cl"].filter_specs if spec.title == "held by a limit"]
    assert [value for value, _ in choices.lookup_choices] == ["any", HOT]


def test_the_run_page_names_the_limit_and_how_many_it_holds_and_runs(held_runs, admin_client):
    hot, _ = held_runs
    page = admin_client.get(reverse("admin:durable_django_run_change", args=[hot[2].run_id])).content.decode()
    assert f"<code>{HOT}</code>" in page
    assert "3 runs held</a>, 1 running under it" in page
    # A run that is not held says so.
    running = admin_client.get(reverse("admin:durable_django_run_change", args=[hot[0].run_id])).content.decode()
    assert "runs held" not in running and "run held" not in running


def test_the_overview_shows_each_key_holding_runs_with_held_and_running_counts(held_runs, admin_client):
    response = listing(admin_client)
    assert [(state.key, state.held, state.running) for state, _ in response.context["held_by_limits"]] == [(HOT, 3, 1)]
    html = response.content.decode()
    assert "Held by limits" in html and "<td>3</td><td>1</td>" in html


def test_the_overview_says_when_no_limit_holds_anything(admin_client, transactional_db):
    assert "no limit holds a run back" in listing(admin_client).content.decode()


def test_a_rate_key_counts_its_running_runs(admin_client, settings):
    settings.DURABLE = {**settings.DURABLE, "QUEUES": {"slow": {"rate_limit": (1, 3600)}}}
    runs = [api.enqueue("tests.noop", {"n": n}, queue="slow") for n in range(3)]
    assert len(claim(limit=10)) == 1
    assert [(s.key, s.held, s.running) for s in api.operations.held_by_limits()] == [("rate:queue:slow", 2, 1)]
    assert api.operations.limit_state("rate:queue:slow").held == 2
    assert {api.get_run(run.run_id).held_by for run in runs[1:]} == {"rate:queue:slow"}


def test_the_tasks_backend_limits_its_queues_and_the_admin_shows_held_task_runs(admin_client):
    backend = settings.TASKS["default"]
    limited = {**backend, "OPTIONS": {**backend["OPTIONS"], "queues": {"reports": {"concurrency": 1}}}}
    with override_settings(TASKS={"default": limited}):
        results = [tasks.add.using(queue_name="reports").enqueue(n, 1) for n in range(3)]
        free = tasks.add.enqueue(5, 5)  # the default queue has no limit
        claimed = {run.run_id for run in claim(limit=10)}
        assert claimed == {results[0].id, free.id}
        held = {result.id for result in results[1:]}
        assert {api.get_run(run_id).held_by for run_id in held} == {"concurrency:queue:reports"}
        assert listed(listing(admin_client, held_by="concurrency:queue:reports")) == held
        page = admin_client.get(reverse("admin:durable_django_run_change", args=[results[1].id])).content.decode()
        assert "2 runs held</a>, 1 running under it" in page
