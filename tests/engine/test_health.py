"""manage.py durable_health: one line per check, exit 0 when all pass and 1 otherwise, never a traceback."""

import io
import subprocess
import sys

import pytest
from django.core.management import call_command

from durable_django import api
from durable_django.engine import lifecycle
from durable_django.testing import run_until_idle
from tests.helpers import ROOT, sql, subprocess_database_url

pytestmark = pytest.mark.django_db(transaction=True)


def health(*args) -> tuple[int, list[str]]:
    out = io.StringIO()
    try:
        call_command("durable_health", *args, stdout=out)
        code = 0
    except SystemExit as exc:
        code = exc.code
    return code, out.getvalue().splitlines()


def line(lines, check) -> str:
    [found] = [text for text in lines if text.split(":")[0].split()[-1] == check]
    return found


def worker(worker_id="host-a:1:abcdef", functions=None):
    """Record a live worker, as a starting durable_worker does."""
    identity = lifecycle.worker_identity(
        worker_id=worker_id, functions=functions, queues=None, tenant_id=None, concurrency=4
    )
    lifecycle.worker_started(identity)
    return identity


def test_it_fails_without_a_worker_and_passes_with_one():
    code, lines = health()
    assert code == 1
    assert [text.split(":")[0] for text in lines] == [
        "OK database",
        "OK migrations",
        "FAIL workers",
        "OK stranded",
        "OK versions",
        "OK parked",
        "OK paused",
    ]
    assert "no worker seen within the last 90s (three leases)" in line(lines, "workers")
    worker()
    code, lines = health()
    assert code == 0, lines
    assert line(lines, "workers").startswith("OK workers: 1 live, the latest seen 0s ago")


def test_it_shows_what_is_paused_and_passes_all_the_same():
    worker()
    assert line(health()[1], "paused") == "OK paused: nothing is paused"
    api.pause(function="tests.noop", reason="bad deploy")
    api.pause(queue="mail")
    code, lines = health()
    assert code == 0, lines
    assert line(lines, "paused") == "OK paused: function tests.noop (bad deploy), queue mail"


def test_a_stopped_worker_and_one_not_seen_for_three_leases_are_not_live():
    stopped = worker("host-a:1:stopped")
    lifecycle.worker_stopped(stopped.worker_id)
    worker("host-b:2:killed")
    sql("UPDATE durable_worker SET last_seen_at = now() - interval '91 seconds' WHERE worker_id = 'host-b:2:killed'")
    code, lines = health()
    assert code == 1 and line(lines, "workers").startswith("FAIL workers")
    # A late heartbeat of the stopped worker does not bring it back.
    lifecycle.worker_seen(stopped)
    assert health()[0] == 1


def test_versions_fails_while_a_due_run_has_a_version_no_live_worker_registers():
    worker(functions=["tests.versioned"])  # this process registers v1 and v2
    sql("UPDATE durable_worker SET functions = '{\"tests.versioned\": [2]}'")
    api.enqueue("tests.versioned", {}, version=2)
    api.enqueue("tests.versioned", {}, version=1, delay=3600)  # not due yet: nothing to run now
    assert line(health()[1], "versions").startswith("OK versions")
    v1 = api.enqueue("tests.versioned", {}, version=1)
    code, lines = health()
    assert code == 1
    assert line(lines, "versions") == (
        "FAIL versions: due runs no live worker can run: tests.versioned v1 (live workers register v2)"
    )
    admin_view = api.operations.versions_overview()
    assert admin_view[0] == {"tests.versioned": [2]}
    assert [(item.name, item.version, item.live_versions) for item in admin_view[1]] == [("tests.versioned", 1, [2])]
    api.cancel(v1.run_id)
    assert line(health()[1], "versions").startswith("OK versions")


def test_versions_sees_a_wait_whose_deadline_passed_for_a_version_no_live_worker_has():
    sleeper = api.enqueue("tests.sleeper", {"seconds": 3600})
    run_until_idle()
    worker(functions=["tests.noop"])
    assert line(health()[1], "versions").startswith("OK versions")
    sql("UPDATE durable_run SET available_at = now() WHERE run_id = %s", [sleeper.run_id])
    assert "tests.sleeper v1 (no live worker registers it)" in line(health()[1], "versions")


def test_oldest_pending_counts_due_runs_from_when_they_became_due():
    worker()
    late = api.enqueue("tests.noop", {})
    api.enqueue("tests.noop", {}, delay=3600)
    code, lines = health("--max-oldest-pending", "60")
    assert code == 0 and line(lines, "oldest-pending").startswith("OK oldest-pending: the oldest due run")
    sql("UPDATE durable_run SET updated_at = now() - interval '5 minutes' WHERE run_id = %s", [late.run_id])
    code, lines = health("--max-oldest-pending", "60")
    assert code == 1
    assert line(lines, "oldest-pending") == (
        f"FAIL oldest-pending: run {late.run_id} (tests.noop v1) has waited 300s to be claimed, more than 60s"
    )
    assert health("--max-oldest-pending", "600")[0] == 0
    # A run retried after a backoff is due from the end of its backoff, however old it is.
    sql(
        "UPDATE durable_run SET available_at = now() - interval '10 seconds', updated_at = now() - interval '1 day' "
        "WHERE run_id = %s",
        [late.run_id],
    )
    oldest = line(health("--max-oldest-pending", "60")[1], "oldest-pending")
    waited = int(oldest.split("has waited ")[1].split("s ")[0])
    assert 10 <= waited < 20, oldest  # ten seconds, and the one or two a loaded machine takes to ask


@pytest.mark.strands
def test_stranded_fails_on_a_run_waiting_for_a_signal_already_stored():
    worker()
    run = api.enqueue("tests.signal_waiter", {})
    run_until_idle()
    assert line(health()[1], "stranded") == "OK stranded: no run is stranded"
    sql(
        "INSERT INTO durable_signal (run_id, signal, occurrence, value, created_at) "
        "VALUES (%s, 'approval', 0, '\"yes\"', now())",
        [run.run_id],
    )
    code, lines = health()
    assert code == 1
    assert line(lines, "stranded") == (
        f"FAIL stranded: run {run.run_id} waits for signal 'approval' #0, which is stored"
    )


def run_health(database_url: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "django", "durable_health"],
        env={"DATABASE_URL": database_url, "DJANGO_SETTINGS_MODULE": "tests.settings", "PYTHONPATH": ROOT},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_an_unreachable_database_or_missing_migrations_is_a_fail_line_not_a_traceback():
    from django.db import connection

    # Nothing listens on port 9 of the loopback: the connection is refused at once.
    result = run_health("postgres://nobody@127.0.0.1:9/postgres")
    assert result.returncode == 1 and "Traceback" not in result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("FAIL database: cannot reach database 'default': OperationalError")
    assert lines[1:] == [
        f"FAIL {check}: not checked: the database cannot be reached"
        for check in ("migrations", "workers", "stranded", "versions", "parked", "paused")
    ]

    sql("CREATE DATABASE durable_health_unmigrated")
    try:
        url = subprocess_database_url().replace(f"/{connection.settings_dict['NAME']}", "/durable_health_unmigrated")
        result = run_health(url)
    finally:
        # FORCE: behind PgBouncer the pooler keeps its server connection to the database open.
        sql("DROP DATABASE durable_health_unmigrated WITH (FORCE)")
    assert result.returncode == 1 and "Traceback" not in result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("OK database")
    assert lines[1].startswith(
        "FAIL migrations: not applied: durable_django.0001_squashed_0022_drop_divergence_like_index"
    )
    assert lines[2] == "FAIL workers: not checked: the durable_django migrations are not all applied"


def test_parked_runs_are_counted_and_fail_past_max_parked():
    worker()
    api.enqueue("tests.parks", {"succeed_on": 99})
    run_until_idle()  # two attempts fail: the run parks
    code, lines = health()
    assert code == 0 and line(lines, "parked") == "OK parked: 1"
    code, lines = health("--max-parked", "1")
    assert code == 0
    code, lines = health("--max-parked", "0")
    assert code == 1 and line(lines, "parked").startswith("FAIL parked: 1 (more than 0 runs")
