"""``durable_worker --reload``: a worker restarted by Django's autoreloader when a Python file it imported changes."""

import contextlib
import os
import signal
import subprocess
import sys

import pytest

from durable_django import api
from tests.helpers import ROOT, wait_until
from tests.workflows import effects

pytestmark = [pytest.mark.process, pytest.mark.django_db(transaction=True)]


@contextlib.contextmanager
def reloading_worker(workers, tmp_path, *args):
    """``durable_worker --reload ARGS`` on a settings module of the test's own (DEBUG on), in its own session so
    the reloader's parent and the worker child it starts are killed together; yields (module, log path, process).

    The worker imports the module: touching it is touching a file the worker imported.
    """
    module = tmp_path / "reload_settings.py"
    module.write_text("from tests.settings import *  # noqa: F403\n\nDEBUG = True\n")
    env = workers.env(DJANGO_SETTINGS_MODULE="reload_settings", PYTHONPATH=f"{ROOT}{os.pathsep}{tmp_path}")
    log_path = tmp_path / "reload.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "django", "durable_worker", "--reload", *args],
            env=env,
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        yield module, log_path, proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


def test_reload_is_refused_without_debug(workers):
    result = subprocess.run(
        [sys.executable, "-m", "django", "durable_worker", "--reload"],
        env=workers.env(),  # tests.settings: DEBUG = False
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert "--reload is for development and needs DEBUG = True" in result.stderr
    assert "starting" not in result.stderr + result.stdout


def test_a_touched_module_restarts_the_worker_which_hands_its_run_to_the_next(workers, tmp_path):
    held = api.enqueue("tests.slow", {"seconds": 60, "tag": "reload"})
    with reloading_worker(workers, tmp_path, "--concurrency", "2", "--grace", "0") as (module, log_path, proc):
        wait_until(lambda: effects.exists("slow-started-reload"), timeout=60, message="the first worker's attempt")
        first_holder = api.get_run(held.run_id).worker_id

        def restarted():
            module.touch()  # again until the watcher, which first takes note of every file, sees a change
            return log_path.read_text().count(" starting: ") >= 2

        wait_until(restarted, timeout=60, interval=0.5, message="a second start")
        # Released by the stopping worker, not left to its lease: the new one takes it over at once.
        wait_until(lambda: api.get_run(held.run_id).attempts == 2, timeout=30, message="the run's second attempt")
        taken_over = api.get_run(held.run_id)
        assert taken_over.recoveries == 0 and taken_over.worker_id != first_holder
        after = api.enqueue("tests.noop", {"after": "reload"})
        wait_until(lambda: api.get_run(after.run_id).status == "succeeded", timeout=30, message="a run after it")
        output = log_path.read_text()
        assert "reload_settings.py changed, reloading." in output
        assert "released 1 run still running after the grace period" in output
        assert "handlers are not installed" not in output
        assert proc.poll() is None


def test_a_reloading_worker_past_max_abandoned_is_replaced_by_a_fresh_process(workers, tmp_path):
    stuck = api.enqueue("tests.stuck_once", {})  # time.sleep(3600) under a 1 s timeout, one attempt
    with reloading_worker(workers, tmp_path, "--max-abandoned", "0", "--grace", "0") as (_, log_path, proc):
        wait_until(lambda: api.get_run(stuck.run_id).status == "failed", timeout=60, message="the stuck run")
        assert api.get_run(stuck.run_id).error_type == "durable_django.exceptions.AttemptTimedOut"
        # One stuck thread is one too many: that process exits with status 3 and the reloader starts another.
        wait_until(lambda: log_path.read_text().count(" starting: ") >= 2, timeout=60, message="a fresh worker")
        after = api.enqueue("tests.noop", {"after": "abandoned"})
        wait_until(lambda: api.get_run(after.run_id).status == "succeeded", timeout=30, message="a run after it")
        assert "1 thread is stuck in a handler past its time limit (--max-abandoned 0)" in log_path.read_text()
        assert proc.poll() is None
