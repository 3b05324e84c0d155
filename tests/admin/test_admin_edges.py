"""Edges of the admin's pages: instants at the ends of what PostgreSQL stores, the schedule search, the overview.

The API refuses instants outside 1970 to a century ahead, but a table may hold
older rows (written before that rule, or by hand): the pages must show them.
"""

import pytest
from django.contrib.admin.utils import quote

from durable_django import api
from durable_django.api import schedules as schedules_api
from durable_django.store import overview as overview_store
from tests.admin.conftest import TENANT
from tests.helpers import sql

pytestmark = pytest.mark.django_db(transaction=True)

CHANGELIST = "/admin/durable_django/run/"
SCHEDULES = "/admin/durable_django/schedule/"

# The first and last instants PostgreSQL and Python both hold, each a zone away from leaving Python's range.
EARLIEST = "0001-01-01 00:00:00+00"
LATEST = "9999-12-31 23:59:59+00"


@pytest.fixture
def far_off_runs():
    """Made by hand, and removed after the test: no engine would leave such runs for the reconciler's check."""
    yield make_far_off_runs
    sql("DELETE FROM durable_run WHERE run_id LIKE 'far-%%'")


def make_far_off_runs() -> list[str]:
    """Runs whose every instant lies at one end of the range: created, due, deadline, lease, journal, signal."""
    made = []
    for label, at in (("earliest", EARLIEST), ("latest", LATEST)):
        for status, waiting_for in (("pending", None), ("waiting", "v1:sleep:nap"), ("running", None)):
            run_id = f"far-{label}-{status}"
            sql(
                """
                INSERT INTO durable_run (run_id, name, status, input, retry_policy, created_at, updated_at,
                                         available_at, deadline, leased_until, waiting_for, attempts,
                                         attempt_started_at, started_at, cancel_requested_at)
                VALUES (%s, 'tests.noop', %s, '{}', '{}', %s, %s, %s, %s, %s, %s, 1, %s, %s, %s)
                """,
                [run_id, status, at, at, at, at, at, waiting_for, at, at, at],
            )
            sql(
                "INSERT INTO durable_step (run_id, step_id, result, created_at) VALUES (%s, 'v1:step:0', '1', %s)",
                [run_id, at],
            )
            sql(
                "INSERT INTO durable_signal (run_id, signal, occurrence, value, created_at)"
                " VALUES (%s, 'go', 0, '1', %s)",
                [run_id, at],
            )
            made.append(run_id)
    return made


@pytest.mark.parametrize("zone", ["America/New_York", "Asia/Tokyo"])
def test_runs_at_the_ends_of_time_list_and_show_under_any_zone(far_off_runs, admin_client, settings, zone):
    settings.TIME_ZONE = zone
    runs = far_off_runs()
    response = admin_client.get(CHANGELIST)
    assert response.status_code == 200
    page = response.content.decode()
    assert all(run_id in page for run_id in runs)
    for run_id in runs:
        response = admin_client.get(f"{CHANGELIST}{quote(run_id)}/change/")
        assert response.status_code == 200, run_id
        assert ("0001-01-01" if "earliest" in run_id else "9999-12-31") in response.content.decode(), run_id


def test_the_schedule_search_finds_the_id_not_ids_that_end_in_it(admin_client, transactional_db):
    wanted = schedules_api.schedule("report", "tests.noop", "0 3 * * *")
    tenants = schedules_api.schedule("report", "tests.noop", "0 4 * * *", tenant_id=TENANT)
    schedules_api.schedule("nightly:report", "tests.noop", "0 5 * * *")
    schedules_api.schedule("weekly:report", "tests.noop", "0 6 * * 1", tenant_id=TENANT)
    response = admin_client.get(SCHEDULES, {"q": "report"})
    assert response.status_code == 200
    found = {schedule.schedule_id for schedule in response.context["cl"].result_list}
    assert found == {f":{wanted.schedule_id}", f"{TENANT}:{tenants.schedule_id}"}
    # An id typed as stored, with its tenant prefix, is found too.
    response = admin_client.get(SCHEDULES, {"q": f"{TENANT}:weekly:report"})
    assert [schedule.schedule_id for schedule in response.context["cl"].result_list] == [f"{TENANT}:weekly:report"]


def test_the_overview_oldest_pending_run_is_one_that_is_due(transactional_db):
    """A run enqueued long ago for later is not waiting for a worker: the one due now is the oldest pending."""
    sql(
        "INSERT INTO durable_run (run_id, name, status, input, retry_policy, created_at, updated_at, available_at)"
        " VALUES ('later', 'tests.noop', 'pending', '{}', '{}', now() - interval '2 days', now() - interval '2 days',"
        " now() + interval '1 day')"
    )
    due = api.enqueue("tests.noop")
    overview = overview_store.overview()
    assert overview.oldest_pending_run_id == due.run_id
