"""The client API, the worker, the scheduler and the admin through a real PgBouncer in transaction mode.

The "pooled" alias reaches the test database through PgBouncer (Debian's 1.18, started by the
``pgbouncer`` fixture) with ``DISABLE_SERVER_SIDE_CURSORS``, as Django asks behind such a pooler; the
"direct" alias bypasses it. ``tox -e pgbouncer`` also runs the store, engine and process tiers with
"default" itself behind PgBouncer.
"""

import re
import threading
import time
from datetime import timedelta

import pytest
from django.conf import settings as django_settings
from django.core.exceptions import ImproperlyConfigured
from django.db import DatabaseError, connections, transaction
from django.utils import timezone

from durable_django import api, schedule
from durable_django.conf import durable_settings
from durable_django.engine import retention
from durable_django.exceptions import InvalidInput
from durable_django.store.sessions import listening
from durable_django.testing import advance_schedule, run_until_idle
from tests.admin.test_admin_pages import RUNS, SCHEDULES, confirm_bulk, listed_run_ids, run_url
from tests.helpers import ADVISORY_LOCKS_HERE, subprocess_database_url, wait_until
from tests.pgbouncer import PgBouncer, routed
from tests.store.factories import claim, complete
from tests.store.test_purge import ids, make_runs

pytestmark = [
    pytest.mark.pgbouncer,
    pytest.mark.django_db(transaction=True, databases=["default", "pooled", "direct"]),
]


@pytest.fixture
def through_pgbouncer(settings, pooled_alias):
    """The durable tables reached through PgBouncer, with no LISTEN_DATABASE: the setting's default."""
    durable = {key: value for key, value in settings.DURABLE.items() if key != "LISTEN_DATABASE"}
    settings.DURABLE = {**durable, "DATABASE": pooled_alias}
    yield
    connections[pooled_alias].close()


def on_direct(query, params=None):
    with connections["direct"].cursor() as cur:
        cur.execute(query, params or [])
        return cur.fetchall()


def in_thread(work):
    """``work()`` on a thread of its own (so on Django connections of its own); its result, or what it raised."""
    outcome = {}

    def body():
        try:
            outcome["result"] = work()
        except Exception as exc:  # noqa: BLE001 - handed to the test
            outcome["error"] = exc
        finally:
            connections.close_all()

    thread = threading.Thread(target=body)
    thread.start()
    thread.join(60)
    assert not thread.is_alive()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"]


def round_trip():
    run = api.enqueue("tests.noop", {"x": 1})
    [held] = claim(functions=["tests.noop"])
    assert complete(held, '{"x": 1}') == "succeeded"
    return api.get_run(run.run_id).output


def test_the_pooled_alias_and_in_tox_pgbouncer_default_really_go_through_pgbouncer(through_pgbouncer, pgbouncer):
    for alias in ("pooled", "default") if django_settings.BEHIND_PGBOUNCER else ("pooled",):
        connections[alias].ensure_connection()
        assert connections[alias].connection.info.port == pgbouncer.port, alias


def test_the_store_prepares_nothing_through_pgbouncer_so_server_sessions_never_collide(through_pgbouncer):
    """Two client connections, one after the other, are served by the same server session."""
    assert in_thread(round_trip) == {"x": 1}
    assert in_thread(round_trip) == {"x": 1}


def test_prepared_statements_forced_on_through_pgbouncer_collide_as_the_check_warns(through_pgbouncer, settings):
    # A PgBouncer of its own: the statements this leaves in its server sessions must meet no other test.
    bouncer = PgBouncer.start(connections["direct"].settings_dict)
    try:
        with routed(bouncer, "pooled"):
            settings.DURABLE = {**settings.DURABLE, "PREPARED_STATEMENTS": True}
            in_thread(round_trip)
            with pytest.raises(DatabaseError, match="prepared statement"):
                in_thread(round_trip)
    finally:
        bouncer.stop()


def test_without_listen_database_wait_for_result_polls_through_pgbouncer(through_pgbouncer):
    assert durable_settings.listen_database is None
    run = api.enqueue("tests.two_steps", {})
    worker = threading.Thread(target=lambda: in_thread(run_until_idle))
    worker.start()
    done = api.wait_for_result(run.run_id, timeout=60)
    worker.join(60)
    assert done.status == "succeeded" and done.output == api.get_run(run.run_id).output
    with transaction.atomic(using="pooled"):
        uncommitted = api.enqueue("tests.noop", {})
        with pytest.raises(InvalidInput, match="has not committed"):
            api.wait_for_result(uncommitted.run_id, timeout=5)
        transaction.set_rollback(True, using="pooled")


def test_a_listen_behind_pgbouncer_without_listen_database_is_refused_not_silently_lost(through_pgbouncer):
    with pytest.raises(ImproperlyConfigured, match="LISTEN_DATABASE"), listening(["durable_wake"]):
        pass


def test_the_periodic_purge_through_pgbouncer_leaves_no_lock_behind(through_pgbouncer):
    make_runs("old-", 25, landed_ago=timedelta(days=2), steps=1)
    assert retention.purge_unless_another_worker_is(timezone.now() - timedelta(days=1), 10) == 25
    assert ids("old-%") == set()
    assert on_direct(ADVISORY_LOCKS_HERE) == [(0,)]


def test_the_admin_works_through_pgbouncer(through_pgbouncer, admin_client):
    finished = api.enqueue("tests.noop", {"n": 1})
    waiting = api.enqueue("tests.signal_waiter", {})
    run_until_idle()
    listing = admin_client.get(RUNS)
    assert listing.status_code == 200
    assert listed_run_ids(listing) == [waiting.run_id, finished.run_id]
    assert listing.context["overview"].last_hour.by_status == {"waiting": 1, "succeeded": 1}
    assert admin_client.get(run_url(waiting.run_id)).status_code == 200
    assert admin_client.get(SCHEDULES).status_code == 200
    outcome = confirm_bulk(admin_client, "cancel_runs", [waiting.run_id, finished.run_id])
    assert sorted(result.label for _, result in outcome.context["rows"]) == ["cancelled", "refused"]
    assert api.get_run(waiting.run_id).status == "cancelled"


# What the worker logs when something went wrong: a database error, a lost connection, a traceback.
PROBLEM = re.compile(r"error|failed \(|lost|cannot|Traceback", re.IGNORECASE)


def pooled_worker_env(workers, **env):
    """A worker subprocess whose "default" goes through PgBouncer, as in production behind one."""
    return workers.env(
        DATABASE_URL=subprocess_database_url("pooled"),
        DURABLE_TEST_DIRECT_URL=subprocess_database_url("direct"),
        DURABLE_TEST_PGBOUNCER="1",
        **env,
    )


def all_succeeded(runs):
    return all(api.get_run(run.run_id).status == "succeeded" for run in runs)


@pytest.mark.process
def test_a_worker_behind_pgbouncer_without_listen_database_says_it_polls_and_still_drains(through_pgbouncer, workers):
    schedule("every-minute", "tests.noop", "* * * * *", input="tick")
    advance_schedule("every-minute", timedelta(minutes=1))  # its tick is due: the worker's scheduler fires it
    before = [api.enqueue("tests.noop", {"n": n}) for n in range(10)] + [api.enqueue("tests.parent", {})]
    worker = workers.start(
        "--concurrency",
        "4",
        env=pooled_worker_env(workers, DURABLE_TEST_LISTEN_DATABASE="", DURABLE_TEST_POLL_SECONDS="0.5"),
    )
    wait_until(lambda: all_succeeded(before), timeout=60, message="the runs enqueued before it started")
    # Enqueued while it is idle: only its poll finds them.
    after = [api.enqueue("tests.noop", {"n": n}) for n in range(10, 20)]
    wait_until(lambda: all_succeeded(after), timeout=60, message="the runs enqueued while it polled")
    wait_until(
        lambda: (
            api.list_runs(name="tests.noop", status="succeeded", limit=100).items
            and any(run.input == "tick" for run in api.list_runs(name="tests.noop", limit=100).items)
        ),
        timeout=60,
        message="the scheduler's fire",
    )
    worker.terminate()
    assert worker.wait(timeout=60) == 0
    log = workers.output(worker)
    assert log.count("there is no LISTEN: polling every 0.5s instead") == 1, log
    told = [line for line in log.splitlines() if " starting: " not in line]  # that line lists function names
    assert [line for line in told if PROBLEM.search(line)] == [], log


def listening_on_direct() -> bool:
    """Whether a session of this test database is LISTENing for wake-ups (the worker's listener)."""
    return on_direct(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query = %s",
        ['LISTEN "durable_wake"'],
    ) != [(0,)]


@pytest.mark.process
def test_with_listen_database_a_worker_behind_pgbouncer_wakes_on_notify_in_milliseconds(through_pgbouncer, workers):
    first = api.enqueue("tests.noop", {"n": 1})
    worker = workers.start(
        "--concurrency",
        "1",
        env=pooled_worker_env(workers, DURABLE_TEST_LISTEN_DATABASE="direct", DURABLE_TEST_POLL_SECONDS="60"),
    )
    wait_until(lambda: all_succeeded([first]), timeout=60, message="the first run")
    wait_until(listening_on_direct, timeout=60, message="the worker's LISTEN on the direct alias")
    started = time.monotonic()
    # Its NOTIFY goes through PgBouncer with the enqueue's commit and reaches the direct LISTEN.
    woken = api.enqueue("tests.noop", {"n": 2})
    wait_until(lambda: all_succeeded([woken]), timeout=60, message="the run enqueued while it was idle")
    assert time.monotonic() - started < 6  # a tenth of the poll interval
    assert "polling" not in workers.output(worker)
