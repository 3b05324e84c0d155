"""The admin's listings and overview read from DURABLE["READ_DATABASE"]; a run's page, actions and workers do not.

The "replica" alias of tests/settings.py is the test database itself under
another alias (no replication to wait for), so which alias each query went
to is what shows where the admin reads; the "durable" alias, a database of its
own, plays a replica that holds other rows than the primary.
"""

import re
from contextlib import ExitStack

import pytest
from django.db import connections
from django.test.utils import CaptureQueriesContext

from durable_django import api
from durable_django.testing import run_until_idle
from tests.admin.conftest import TENANT
from tests.admin.test_admin_pages import RUNS, SCHEDULES, confirm_bulk, listed_run_ids, run_url

DURABLE_TABLE = re.compile(r"\bdurable_(run|step|signal|schedule)\b")


@pytest.fixture
def read_from(settings):
    def point(alias):
        settings.DURABLE = {**settings.DURABLE, "READ_DATABASE": alias}

    return point


class Queries:
    """The durable-table queries each alias received in the block, by alias."""

    def __init__(self, *aliases):
        self.aliases = aliases

    def __enter__(self):
        self._stack = ExitStack()
        self.captured = {
            alias: self._stack.enter_context(CaptureQueriesContext(connections[alias])) for alias in self.aliases
        }
        return self

    def __exit__(self, *exc):
        self._stack.close()

    def on(self, alias) -> list[str]:
        return [query["sql"] for query in self.captured[alias] if DURABLE_TABLE.search(query["sql"])]


@pytest.mark.django_db(transaction=True, databases=["default", "replica"])
def test_listings_and_the_overview_read_the_replica_and_nothing_else_does(read_from, admin_client):
    read_from("replica")
    done = api.enqueue("tests.noop", {"n": 1}, idempotency_key="order-1")
    waiting = api.enqueue("tests.signal_waiter", {}, tenant_id=TENANT)
    api.schedule("nightly", "tests.noop", "0 2 * * *")

    with Queries("default", "replica") as worker:
        run_until_idle()
    assert worker.on("replica") == [] and worker.on("default")  # claims and landings: the primary

    with Queries("default", "replica") as listing:
        page = admin_client.get(RUNS)
        assert listed_run_ids(page) == [waiting.run_id, done.run_id]
        assert page.context["overview"].last_hour.by_status == {"waiting": 1, "succeeded": 1}
        assert listed_run_ids(admin_client.get(RUNS, {"q": "order-1"})) == [done.run_id]
        assert listed_run_ids(admin_client.get(RUNS, {"tenant": TENANT, "status": "waiting"})) == [waiting.run_id]
        assert admin_client.get(SCHEDULES).status_code == 200
    assert listing.on("default") == []
    read = "\n".join(listing.on("replica"))
    assert 'FROM "durable_run"' in read and 'FROM "durable_schedule"' in read
    assert "interval '1 day'" in read and "WITH RECURSIVE tenants" in read  # the overview, the tenant filter

    with Queries("default", "replica") as run_page:
        assert admin_client.get(run_url(waiting.run_id)).status_code == 200
    assert run_page.on("replica") == [] and run_page.on("default")

    with Queries("default", "replica") as action:
        outcome = confirm_bulk(admin_client, "cancel_runs", [waiting.run_id])
        assert [result.label for _, result in outcome.context["rows"]] == ["cancelled"]
    # The listing behind the form may read the replica; the targets and the cancel go to the primary.
    assert all(query.lstrip().startswith(("SELECT", "WITH")) for query in action.on("replica"))
    primary = "\n".join(action.on("default"))
    assert '"durable_run"."run_id" IN' in primary and "UPDATE durable_run" in primary
    assert api.get_run(waiting.run_id).status == "cancelled"


@pytest.mark.django_db(transaction=True, databases=["default", "durable"])
def test_the_listing_shows_what_the_replica_holds(read_from, admin_client):
    """A replica that lags shows its own rows; the primary's newer run is not listed until it arrives there."""
    read_from("durable")
    primary_only = api.enqueue("tests.noop", {})
    with connections["durable"].cursor() as cur:
        cur.execute(
            "INSERT INTO durable_run (run_id, name, status, retry_policy) "
            "VALUES ('replica-only', 'tests.noop', 'succeeded', '{}')"
        )
    listing = admin_client.get(RUNS)
    assert listed_run_ids(listing) == ["replica-only"]
    assert listing.context["overview"].last_hour.by_status == {"succeeded": 1}
    # A run's page reads the primary: the run the replica has not seen yet is there.
    assert admin_client.get(run_url(primary_only.run_id)).status_code == 200
