"""Pausing across real worker processes: running attempts finish, nothing new starts, the rest runs after."""

import pytest

from durable_django import api
from tests.helpers import sql, wait_until
from tests.workflows import effects

pytestmark = [pytest.mark.process, pytest.mark.django_db(transaction=True)]


def statuses(name):
    return dict(sql("SELECT status, count(*) FROM durable_run WHERE name = %s GROUP BY status", [name]))


def test_a_pause_stops_new_attempts_on_every_worker_lets_running_ones_finish_and_unpause_runs_the_rest(workers):
    procs = [workers.start("--concurrency", "2", DURABLE_TEST_POLL_SECONDS="0.5") for _ in range(2)]
    workers.wait_started(*procs)
    running = api.enqueue("tests.slow", {"seconds": 3, "tag": "first"})
    wait_until(lambda: effects.exists("slow-started-first"), message="the first attempt to start")
    api.pause(function="tests.slow", reason="investigating")
    later = [api.enqueue("tests.slow", {"seconds": 0, "tag": f"n{n}"}) for n in range(10)]
    for n in range(10):
        api.enqueue("tests.noop", {"n": n})
    # The running attempt finishes; the other function's runs all run, on both workers' watch.
    wait_until(lambda: api.get_run(running.run_id).status == "succeeded", timeout=60, message="the running attempt")
    wait_until(lambda: statuses("tests.noop") == {"succeeded": 10}, timeout=60, message="the unpaused function")
    # A claim that meets a paused run holds it back (held_by), and no claim considers it again until the pause
    # is lifted: once every one is held, none can start, however long the workers go on polling.
    held = "SELECT held_by, count(*) FROM durable_run WHERE status = 'pending' GROUP BY held_by"
    wait_until(lambda: sql(held) == [("paused:function:tests.slow", 10)], timeout=30, message="the paused runs held")
    assert statuses("tests.slow") == {"succeeded": 1, "pending": 10}
    assert effects.count("slow-finished") == 1
    api.unpause(function="tests.slow")
    wait_until(lambda: statuses("tests.slow") == {"succeeded": 11}, timeout=60, message="the paused runs after")
    assert all(api.get_run(run.run_id).attempts == 1 for run in later)
    for proc in procs:
        proc.terminate()
        proc.wait(30)
    logs = [workers.output(proc) for proc in procs]
    assert all("paused: nothing" in log for log in logs), logs  # the start line said what was paused
    assert all("summary: " in log for log in logs)


def test_a_worker_started_under_a_pause_says_so(workers):
    api.pause(queue="mail", reason="maintenance")
    proc = workers.start("--concurrency", "1")
    workers.wait_started(proc)
    wait_until(lambda: "paused: queue mail" in workers.output(proc), message="the start line")
    proc.terminate()
    proc.wait(30)
    assert "paused: queue mail" in workers.output(proc).split("summary:")[-1]
