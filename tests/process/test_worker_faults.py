"""Real durable_worker processes under SIGKILL, SIGSTOP, SIGTERM and a PostgreSQL restart."""

import signal
import subprocess
import sys
import tempfile
import time
from datetime import timedelta

import pytest

from durable_django import api
from tests.helpers import ROOT, sql, statuses_on, wait_until
from tests.workflows import effects

pytestmark = [pytest.mark.process, pytest.mark.django_db(transaction=True)]

SHORT_LEASE = {"DURABLE_TEST_LEASE_SECONDS": "2"}


def status(run_id):
    return api.get_run(run_id).status


def test_sigkill_inside_the_second_step_is_finished_by_another_worker_with_the_first_step_once(workers):
    run = api.enqueue("tests.two_steps", {"second_sleep": 60})
    doomed = workers.start("--concurrency", "1", **SHORT_LEASE)
    wait_until(lambda: effects.exists("in-second"), message="the second step to start")
    doomed.send_signal(signal.SIGKILL)
    doomed.wait(timeout=10)
    sql("UPDATE durable_run SET input = '{\"second_sleep\": 0}' WHERE run_id = %s", [run.run_id])
    workers.start("--concurrency", "1", **SHORT_LEASE)
    wait_until(lambda: status(run.run_id) == "succeeded", timeout=60, message="recovery")
    done = api.get_run(run.run_id)
    assert done.output == ["one", "two"]
    assert done.attempts == 2 and done.recoveries == 1 and done.failures == 0
    assert effects.count("first") == 1
    assert effects.count("second-started") == 2


def test_a_worker_paused_past_its_lease_cannot_change_the_output_after_sigcont(workers):
    run = api.enqueue("tests.two_steps", {"second_sleep": 3})
    paused = workers.start("--concurrency", "1", **SHORT_LEASE)
    wait_until(lambda: effects.exists("in-second"), message="the second step to start")
    paused.send_signal(signal.SIGSTOP)
    sql("UPDATE durable_run SET input = '{\"second_sleep\": 0}' WHERE run_id = %s", [run.run_id])
    workers.start("--concurrency", "1", **SHORT_LEASE)
    wait_until(lambda: status(run.run_id) == "succeeded", timeout=60, message="the second worker to finish")
    finished = api.get_run(run.run_id)
    journal_before = sql("SELECT step_id, result::text FROM durable_step ORDER BY step_id")
    paused.send_signal(signal.SIGCONT)
    # The paused attempt wakes, finishes its step, and tries to journal it: the fence stops it.
    wait_until(lambda: f"run {run.run_id} lost its lease" in workers.output(paused), message="the stale attempt")
    after = api.get_run(run.run_id)
    assert (after.status, after.output, after.attempts, after.updated_at) == (
        finished.status,
        finished.output,
        finished.attempts,
        finished.updated_at,
    )
    assert sql("SELECT step_id, result::text FROM durable_step ORDER BY step_id") == journal_before


def test_a_run_that_keeps_killing_its_worker_is_failed_after_max_recoveries(workers):
    run = api.enqueue("tests.two_steps", {"second_sleep": 60})
    limits = {**SHORT_LEASE, "DURABLE_TEST_MAX_RECOVERIES": "1"}
    for _ in range(2):
        worker = workers.start("--concurrency", "1", **limits)
        wait_until(lambda: effects.exists("in-second"), timeout=30, message="the poison step")
        effects.remove("in-second")
        worker.send_signal(signal.SIGKILL)
        worker.wait(timeout=10)
    workers.start("--concurrency", "1", **limits)
    wait_until(lambda: status(run.run_id) == "failed", timeout=60, message="the run to be failed")
    failed = api.get_run(run.run_id)
    assert failed.recoveries == 2 and "MAX_RECOVERIES=1" in failed.error
    assert effects.count("second-started") == 2


def test_sigterm_stops_an_idle_worker_promptly(workers):
    worker = workers.start("--concurrency", "2", DURABLE_TEST_POLL_SECONDS="60")
    workers.wait_idle(worker)
    started = time.monotonic()
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=20) == 0
    assert time.monotonic() - started < 6  # far below the 60s poll interval


def test_sigterm_lets_a_busy_attempt_finish_before_exiting(workers):
    run = api.enqueue("tests.slow", {"seconds": 2, "tag": "busy"})
    worker = workers.start("--concurrency", "1")
    wait_until(lambda: effects.exists("slow-started-busy"), message="the attempt to start")
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=30) == 0
    assert status(run.run_id) == "succeeded"
    assert effects.count("slow-finished") == 1


def test_sigterm_past_the_grace_period_releases_the_run_for_another_worker(workers):
    run = api.enqueue("tests.slow", {"seconds": 30, "tag": "long"})
    worker = workers.start("--concurrency", "1", "--grace", "0.5")
    wait_until(lambda: effects.exists("slow-started-long"), message="the attempt to start")
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=20) == 0
    released = api.get_run(run.run_id)
    assert released.status == "pending" and released.recoveries == 0 and released.leased_until is None
    assert "released 1 run" in workers.output(worker)


def test_a_second_signal_stops_at_once(workers):
    api.enqueue("tests.slow", {"seconds": 30, "tag": "twice"})
    worker = workers.start("--concurrency", "1", "--grace", "60")
    wait_until(lambda: effects.exists("slow-started-twice"), message="the attempt to start")
    worker.send_signal(signal.SIGINT)
    wait_until(lambda: "stopping: finishing 1 attempt" in workers.output(worker), message="the first signal")
    assert worker.poll() is None  # still draining within its 60s grace
    worker.send_signal(signal.SIGINT)
    assert worker.wait(timeout=10) == 128 + signal.SIGINT


def test_burst_exits_when_nothing_is_due(workers):
    runs = [api.enqueue("tests.noop", {"n": n}) for n in range(5)]
    later = api.enqueue("tests.noop", {}, delay=3600)
    worker = workers.start("--burst", "--concurrency", "2")
    assert worker.wait(timeout=60) == 0
    assert {status(run.run_id) for run in runs} == {"succeeded"}
    assert status(later.run_id) == "pending"
    log = workers.output(worker)
    # One INFO line per state change, and the summary.
    assert all(
        f"claimed run {run.run_id}" in log and f"run {run.run_id} (tests.noop v1) succeeded" in log for run in runs
    ), log
    assert "summary: claimed 5, running 0, succeeded 5, failed 0" in log, log


def test_a_failing_function_is_retried_with_backoff_and_ends_failed_with_its_traceback(workers):
    run = api.enqueue("tests.always_fails", {})
    workers.start("--concurrency", "1")
    wait_until(lambda: status(run.run_id) == "failed", timeout=60, message="the run to fail")
    failed = api.get_run(run.run_id)
    assert failed.failures == 3 and "KeyError: 'broken on purpose'" in failed.error
    assert effects.count("always-fails") == 3
    assert failed.updated_at - failed.created_at >= timedelta(seconds=0.6)  # backoff: 0.2s, then 0.4s


def test_version_2_worker_leaves_version_1_runs_unless_it_has_version_1(workers):
    v1 = api.enqueue("tests.versioned", {}, version=1)
    v2 = api.enqueue("tests.versioned", {}, version=2)
    only_v2 = workers.start("--burst", DURABLE_TEST_WITHOUT_V1="1")
    assert only_v2.wait(timeout=60) == 0
    assert (status(v1.run_id), status(v2.run_id)) == ("pending", "succeeded")
    assert api.get_run(v1.run_id).attempts == 0
    both = workers.start("--burst")
    assert both.wait(timeout=60) == 0
    assert api.get_run(v1.run_id).output == {"version": 1}


def test_an_async_function_completes_in_a_worker(workers):
    run = api.enqueue("tests.async", {"x": 2})
    assert workers.start("--burst").wait(timeout=60) == 0
    assert api.get_run(run.run_id).output == {"doubled": 4, "tripled": 6}


def test_a_notify_wakes_an_idle_worker_long_before_the_poll_interval(workers):
    worker = workers.start("--concurrency", "1", DURABLE_TEST_POLL_SECONDS="60")
    workers.wait_idle(worker)
    started = time.monotonic()
    run = api.enqueue("tests.noop", {})
    wait_until(lambda: status(run.run_id) == "succeeded", timeout=30, message="the run")
    assert time.monotonic() - started < 6  # a tenth of the poll interval


def test_a_worker_survives_a_postgresql_restart_and_loses_no_run(workers):
    """On a PostgreSQL server of its own, so the restart cuts off no other test."""
    pgserver = pytest.importorskip("pgserver", reason="a private server for the restart needs pgserver")
    from pgserver._commands import pg_ctl

    # Not under pytest's tmp_path: pgserver runs PostgreSQL as its own user, which must reach the directory.
    server = pgserver.get_server(tempfile.mkdtemp(prefix="durable-pg-restart-"), cleanup_mode="delete")
    try:
        env = workers.env(DATABASE_URL=server.get_uri(), DURABLE_TEST_POLL_SECONDS="1")

        def manage(*args):
            result = subprocess.run(
                [sys.executable, "-m", "django", *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120
            )
            assert result.returncode == 0, result.stderr
            return result.stdout

        def status_on_private_server(run_id):
            return statuses_on(server.get_uri(), [run_id]).get(run_id)

        manage("migrate", "durable_django", "-v", "0")
        worker = workers.start("--concurrency", "2", env=env)
        before = manage("durable_enqueue", "tests.noop", '{"when": "before"}').split()[-1]
        wait_until(lambda: status_on_private_server(before) == "succeeded", message="the first run")
        pg_ctl(["-w", "restart", "-m", "fast"], pgdata=server.pgdata, user=server.system_user)
        after = manage("durable_enqueue", "tests.noop", '{"when": "after"}').split()[-1]
        wait_until(
            lambda: status_on_private_server(after) == "succeeded",
            timeout=60,
            message="the run enqueued after the restart",
        )
        assert worker.poll() is None
        log = workers.output(worker)
        assert "claim failed" in log or "listener lost its connection" in log
    finally:
        workers.stop_all()
        server.cleanup()


def test_the_worker_refuses_a_database_without_the_durable_migrations(workers):
    from tests.helpers import subprocess_database_url

    sql("CREATE DATABASE durable_unmigrated")
    try:
        url = subprocess_database_url().replace(f"/{_test_db_name()}", "/durable_unmigrated")
        result = subprocess.run(
            [sys.executable, "-m", "django", "durable_worker", "--burst"],
            env=workers.env(DATABASE_URL=url),
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        # FORCE: behind PgBouncer (tox -e pgbouncer) the pooler keeps the worker's server session open.
        sql("DROP DATABASE durable_unmigrated WITH (FORCE)")
    assert result.returncode != 0
    assert "migrations are not applied" in result.stderr and "manage.py migrate durable_django" in result.stderr


def _test_db_name():
    from django.db import connection

    return connection.settings_dict["NAME"]


def test_a_busy_worker_never_holds_a_run_back_from_an_idle_one(workers):
    """A worker whose attempts were short claims ahead of its slot; when one attempt turns long, the run it
    claimed ahead goes to an idle worker within a claim round, not after the long attempt."""
    warm_up = [api.enqueue("tests.noop", {"n": n}) for n in range(40)]
    busy = workers.start("--concurrency", "1", DURABLE_TEST_POLL_SECONDS="60")
    wait_until(lambda: all(status(run.run_id) == "succeeded" for run in warm_up), message="the warm-up runs")
    long_runs = [api.enqueue("tests.slow", {"seconds": 60, "tag": tag}) for tag in ("a", "b")]
    wait_until(lambda: effects.exists("slow-started-a"), message="the first long run to start")
    idle = workers.start("--concurrency", "1", DURABLE_TEST_POLL_SECONDS="60")
    # Held back behind the first, the second would start after 60s.
    wait_until(lambda: effects.exists("slow-started-b"), timeout=20, message="the second long run to start")
    assert {api.get_run(run.run_id).worker_id.rsplit(":", 2)[1] for run in long_runs} == {str(busy.pid), str(idle.pid)}
