"""The lines a real durable_worker prints for a person: counts in their plural, nothing dangling, every fact kept."""

import json
import re
import signal

import pytest

from durable_django import api
from tests.helpers import wait_until
from tests.workflows import tasks

pytestmark = [pytest.mark.process, pytest.mark.django_db(transaction=True)]

YEARLY = {"name": "tests.noop", "cron": "0 0 1 1 *"}


def stop(workers, proc):
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0, workers.output(proc)
    return workers.output(proc)


def run_with_schedules(workers, schedules):
    """A worker's log from its start until it has synced these settings schedules."""
    proc = workers.start("--concurrency", "1", DURABLE_TEST_SCHEDULES=json.dumps(schedules))
    wait_until(lambda: " paused: " in workers.output(proc), timeout=60, message="the worker to start")
    wait_until(lambda: "synced " in workers.output(proc), timeout=60, message="the settings sync")
    return stop(workers, proc)


def sync_lines(log):
    return [line for line in log.splitlines() if line.startswith(("synced ", "removed "))]


def test_the_settings_sync_says_each_count_in_its_plural_and_lists_only_what_it_removed(workers):
    log = run_with_schedules(workers, {"yearly-a": YEARLY, "yearly-b": YEARLY})
    assert sync_lines(log) == ["synced 2 schedules from settings"], log
    log = run_with_schedules(workers, {"yearly-a": YEARLY})
    assert sync_lines(log) == [
        "synced 1 schedule from settings",
        "removed 1 schedule no longer declared in settings: yearly-b",
    ], log


def start_line(log):
    return next(line for line in log.splitlines() if " starting: " in line)


def test_the_start_line_names_each_durable_function_once_and_the_tasks_it_runs(workers):
    proc = workers.start("--burst", "--concurrency", "1")
    assert proc.wait(timeout=120) == 0, workers.output(proc)
    line = start_line(workers.output(proc))
    assert line.endswith(" and every task of the Tasks backend"), line
    # Two versions of one function are named once, with their versions.
    assert " tests.versioned (v1, v2) " in line and line.count("tests.versioned") == 1, line
    assert "tests.noop, " in line, line

    proc = workers.start("--burst", "--functions", "tests.noop,tests.workflows.tasks.add")
    assert proc.wait(timeout=120) == 0, workers.output(proc)
    line = start_line(workers.output(proc))
    assert line.endswith("; runs durable function tests.noop and the Tasks-backend task tests.workflows.tasks.add"), (
        line
    )


def test_a_task_the_start_line_promises_is_run(workers):
    """What the start line says of the Tasks backend is so: the worker runs a task enqueued through it."""
    enqueued = tasks.add.enqueue(2, 3)
    proc = workers.start("--burst", "--concurrency", "1")
    assert proc.wait(timeout=120) == 0, workers.output(proc)
    assert api.get_run(enqueued.id).output == 5
    assert f"claimed run {enqueued.id} (tests.workflows.tasks.add v0): claim 1\n" in workers.output(proc)


def test_claims_and_failures_are_said_apart_and_a_failure_keeps_its_message(workers):
    flaky = api.enqueue("tests.flaky", {"succeed_on": 3})
    broken = api.enqueue("tests.always_fails", {})
    proc = workers.start("--concurrency", "1")
    wait_until(
        lambda: {api.get_run(flaky.run_id).status, api.get_run(broken.run_id).status} == {"succeeded", "failed"},
        timeout=120,
        message="both runs to end",
    )
    log = stop(workers, proc)
    for claim, after in [(1, ""), (2, ", after 1 failure"), (3, ", after 2 failures")]:
        assert f"claimed run {flaky.run_id} (tests.flaky v1): claim {claim}{after}\n" in log, log
    assert (
        f"run {flaky.run_id} (tests.flaky v1) failed on claim 2 (failure 2 of 3): "
        "builtins.ValueError: attempt 2 fails on purpose; retry in "
    ) in log, log
    assert f"run {flaky.run_id} (tests.flaky v1) succeeded on claim 3, after 2 failures\n" in log, log
    # The last failure keeps the exception's type and message, on its one line.
    assert (
        f"run {broken.run_id} (tests.always_fails v1) failed on claim 3 (failure 3 of 3): "
        "builtins.KeyError: 'broken on purpose'\n"
    ) in log, log
    # No line numbers an attempt that a person would read as a count of failures.
    assert not re.search(r"\battempt \d", re.sub(r"attempt \d fails on purpose", "", log)), log
