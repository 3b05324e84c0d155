"""Real workers through a PostgreSQL restart and beside runs whose values the database refuses."""

import collections
import subprocess
import sys
import tempfile

import pytest

from durable_django import api
from tests.helpers import ROOT, statuses_on, wait_until
from tests.workflows import effects

pytestmark = [pytest.mark.process, pytest.mark.django_db(transaction=True)]


@pytest.mark.long
def test_a_postgresql_restart_under_load_re_executes_no_step_whose_function_returned(workers, effects_dir):
    """On a server of its own (the restart cuts off no other test). The lease (30s) outlasts the restart."""
    pgserver = pytest.importorskip("pgserver", reason="a private server for the restart needs pgserver")
    from pgserver._commands import pg_ctl

    server = pgserver.get_server(tempfile.mkdtemp(prefix="durable-pg-restart-"), cleanup_mode="delete")
    try:
        env = workers.env(DATABASE_URL=server.get_uri(), DURABLE_TEST_POLL_SECONDS="1")

        def manage(*args):
            result = subprocess.run(
                [sys.executable, "-m", "django", *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120
            )
            assert result.returncode == 0, result.stderr
            return result.stdout

        manage("migrate", "durable_django", "-v", "0")
        # One client process for the eight submits (a Django process each cost seconds on a busy machine).
        run_ids = manage(
            "shell",
            "-v",
            "0",
            "-c",
            "from durable_django import api\n"
            "for _ in range(8): print(api.enqueue('tests.counted_steps', {'steps': 12, 'pause': 0.05}).run_id)",
        ).split()
        assert len(run_ids) == 8, run_ids
        worker = workers.start("--concurrency", "4", env=env)
        wait_until(
            lambda: sum(effects.count(f"counted-{run_id}") for run_id in run_ids) >= 10, message="steps under way"
        )
        pg_ctl(["-w", "restart", "-m", "fast"], pgdata=server.pgdata, user=server.system_user)

        def finished():
            statuses = statuses_on(server.get_uri(), run_ids)
            return len(statuses) == len(run_ids) and set(statuses.values()) == {"succeeded"}

        wait_until(finished, timeout=90, interval=0.5, message="every run to succeed after the restart")
        assert worker.poll() is None
        for run_id in run_ids:
            with open(effects_dir / f"counted-{run_id}") as handle:
                executed = collections.Counter(line.strip() for line in handle)
            assert sorted(executed) == sorted(str(i) for i in range(12)), run_id
            assert set(executed.values()) == {1}, (run_id, executed)
        log = workers.output(worker)
        assert "cannot be reached" in log
    finally:
        workers.stop_all()
        server.cleanup()


def test_a_run_whose_output_the_database_cannot_store_fails_alone_and_the_worker_keeps_going(workers):
    poisoned = api.enqueue("tests.nul_output", {})
    healthy = [api.enqueue("tests.noop", {"n": n}) for n in range(20)]
    worker = workers.start("--concurrency", "4")
    wait_until(lambda: api.get_run(poisoned.run_id).status == "failed", timeout=60, message="the poisoned run")
    wait_until(
        lambda: all(api.get_run(run.run_id).status == "succeeded" for run in healthy),
        timeout=60,
        message="the healthy runs",
    )
    failed = api.get_run(poisoned.run_id)
    assert failed.failures == 3 and "NUL" in failed.error
    # It keeps going: a run enqueued after the poisoned one failed runs too.
    after = api.enqueue("tests.noop", {"n": "after"})
    wait_until(lambda: api.get_run(after.run_id).status == "succeeded", timeout=60, message="a run after")
    assert worker.poll() is None
    assert workers.output(worker).count("WARNING") < 5
