"""The admin with the durable tables on another alias than "default" (``DURABLE["DATABASE"]``).

The "durable" alias of tests/settings.py is a database of its own with every
table migrated, so a read or write that goes to "default" by mistake finds
empty durable tables there: the page breaks, and the captured queries show it.
"""

import re
from contextlib import contextmanager

import pytest
from django.db import connections
from django.test.utils import CaptureQueriesContext

from durable_django import api
from durable_django.api import schedules as schedules_api
from durable_django.checks import check_database
from durable_django.testing import run_until_idle
from tests.admin.test_admin_pages import RUNS, SCHEDULES, confirm_bulk, listed_run_ids, run_url, schedule_url

ALIAS = "durable"
DURABLE_TABLE = re.compile(r"\bdurable_(run|step|signal|schedule)\b")


class DurableTablesOnDefaultOnly:
    """A router that migrates durable_django to "default" alone."""

    def allow_migrate(self, db, app_label, **hints):
        return db == "default" if app_label == "durable_django" else None


def on_alias(query: str, params=None):
    with connections[ALIAS].cursor() as cur:
        cur.execute(query, params or [])
        return cur.fetchall() if cur.description else None


@pytest.fixture
def durable_elsewhere(settings):
    settings.DURABLE = {**settings.DURABLE, "DATABASE": ALIAS}


@contextmanager
def nothing_durable_on_default():
    """Fail if a query sent to "default" in the block touches a durable table (sessions, users, the log may)."""
    with CaptureQueriesContext(connections["default"]) as captured:
        yield
    assert [query["sql"] for query in captured if DURABLE_TABLE.search(query["sql"])] == []


@pytest.mark.django_db(transaction=True, databases=["default", ALIAS])
def test_the_runs_admin_reads_and_acts_on_the_durable_alias(durable_elsewhere, admin_client):
    parent = api.enqueue("tests.parent", {"child": {"wait_signal": True}}).run_id
    run_until_idle(functions=["tests.parent", "tests.child"])
    [child] = [run.run_id for run in api.list_runs(name="tests.child").items]
    api.emit_signal(child, "note", {"early": True})

    with nothing_durable_on_default():
        listing = admin_client.get(RUNS)
        assert sorted(listed_run_ids(listing)) == sorted([parent, child])
        assert listing.context["overview"].last_hour.by_status == {"waiting": 2}
        assert listed_run_ids(admin_client.get(RUNS, {"q": child})) == [child]
        assert listed_run_ids(admin_client.get(RUNS, {"parent": parent})) == [child]

        page = admin_client.get(run_url(parent))
        assert page.status_code == 200
        html = page.content.decode()
        assert 'data-step-id="v1:spawn-child:0"' in html and f'href="{run_url(child)}"' in html
        child_html = admin_client.get(run_url(child)).content.decode()
        assert 'id="durable-signals"' in child_html and f'href="{run_url(parent)}"' in child_html

        outcome = confirm_bulk(admin_client, "cancel_runs", [parent])
        assert [result.label for _, result in outcome.context["rows"]] == ["cancelled"]
    assert api.get_run(child).status == "cancelled"


@pytest.mark.django_db(transaction=True, databases=["default", ALIAS])
def test_the_runs_listing_estimates_its_count_on_the_durable_alias(durable_elsewhere, admin_client):
    on_alias("""INSERT INTO durable_run (run_id, name, status, retry_policy)
                SELECT 'bulk-' || i, 'tests.noop', 'succeeded', '{}' FROM generate_series(1, 1500) i""")
    on_alias("ANALYZE durable_run")
    with nothing_durable_on_default():
        paginator = admin_client.get(RUNS).context["cl"].paginator
    assert paginator.estimated and paginator.count >= 1000


@pytest.mark.django_db(transaction=True, databases=["default", ALIAS])
def test_the_schedules_admin_reads_and_writes_on_the_durable_alias(durable_elsewhere, admin_client):
    with nothing_durable_on_default():
        added = admin_client.post(
            f"{SCHEDULES}add/",
            {
                "key": "nightly",
                "name": "tests.noop",
                "cron": "30 2 * * *",
                "tz": "UTC",
                "input": '{"report": 1}',
                "enabled": "on",
            },
        )
        assert added.status_code == 302
        again = admin_client.post(
            f"{SCHEDULES}add/",
            {"key": "nightly", "name": "tests.noop", "cron": "* * * * *", "tz": "UTC", "input": "", "enabled": "on"},
        )
        assert "already exists" in again.context["adminform"].form.errors["key"][0]
        assert admin_client.get(SCHEDULES, {"q": "nightly"}).context["cl"].result_count == 1
        changed = admin_client.post(
            schedule_url(":nightly"),
            {"name": "tests.noop", "cron": "0 6 * * *", "tz": "UTC", "input": '{"report": 2}', "enabled": "on"},
        )
        assert changed.status_code == 302
        stored = schedules_api.get_schedule("nightly")
        assert (stored.cron, stored.input) == ("0 6 * * *", {"report": 2})
        fired = admin_client.post(schedule_url(":nightly", "fire/"), {"confirm": "yes"})
        [run] = api.list_runs(name="tests.noop").items
        assert fired.url == run_url(run.run_id) and run.input == {"report": 2}
        admin_client.post(
            SCHEDULES, {"action": "disable_schedules", "_selected_action": [":nightly"], "index": "0", "confirm": "yes"}
        )
        assert not schedules_api.get_schedule("nightly").enabled
        assert admin_client.post(schedule_url(":nightly", "delete/"), {"post": "yes"}).status_code == 302
    assert schedules_api.get_schedule("nightly") is None


def test_a_durable_alias_the_routers_do_not_migrate_to_fails_a_system_check(settings):
    settings.DURABLE = {**settings.DURABLE, "DATABASE": ALIAS}
    assert check_database() == []
    settings.DATABASE_ROUTERS = [f"{__name__}.DurableTablesOnDefaultOnly"]
    [error] = check_database()
    assert error.id == "durable_django.E009" and "'durable'" in error.msg and "durable_django.Run" in error.msg
    settings.DURABLE = {**settings.DURABLE, "DATABASE": "default"}
    assert check_database() == []
