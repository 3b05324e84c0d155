"""Real durable_worker processes running changed code: a SIGKILL between a patch marker and the next step,
and a divergence seen by a worker whose code changed under a sleeping run."""

import signal

import pytest

from durable_django import api
from durable_django.testing import make_due
from tests.helpers import sql, wait_until
from tests.process.test_observability_processes import free_port, scrape
from tests.workflows import effects

pytestmark = [pytest.mark.process, pytest.mark.django_db(transaction=True)]

SHORT_LEASE = {"DURABLE_TEST_LEASE_SECONDS": "2"}
MARKER = "v1:@patch:rename-second:0"


def journal(run_id):
    return dict(sql("SELECT step_id, result::text FROM durable_step WHERE run_id = %s", [run_id]))


def test_a_sigkill_between_the_patch_marker_and_the_next_step_replays_the_same_answer(workers):
    run = api.enqueue("tests.changing", {"pause_after_patch": 60})
    doomed = workers.start("--concurrency", "1", DURABLE_TEST_CODE="patched", **SHORT_LEASE)
    wait_until(lambda: effects.exists("patch-recorded"), timeout=60, message="the patch marker to be journalled")
    doomed.send_signal(signal.SIGKILL)
    doomed.wait(timeout=10)
    assert journal(run.run_id) == {"v1:first:0": '"one"', MARKER: "true"}
    sql("UPDATE durable_run SET input = '{\"pause_after_patch\": 0}' WHERE run_id = %s", [run.run_id])
    workers.start("--concurrency", "1", DURABLE_TEST_CODE="patched", **SHORT_LEASE)
    wait_until(lambda: api.get_run(run.run_id).status == "succeeded", timeout=60, message="recovery")
    assert api.get_run(run.run_id).output == ["one", "renamed", "three"]
    assert journal(run.run_id)[MARKER] == "true" and effects.count("second-renamed") == 1
    assert sql("SELECT count(*) FROM durable_replay_divergence")[0][0] == 0


def test_a_worker_running_changed_code_sees_the_divergence_and_counts_it(workers):
    old = workers.start("--concurrency", "1", DURABLE_TEST_CODE="old")
    run = api.enqueue("tests.changing", {"nap": 3600})
    wait_until(lambda: api.get_run(run.run_id).status == "waiting", timeout=60, message="the old code's sleep")
    old.send_signal(signal.SIGTERM)
    assert old.wait(timeout=60) == 0
    port = free_port()
    changed = workers.start("--concurrency", "1", "--metrics-port", str(port), DURABLE_TEST_CODE="changed")
    workers.wait_started(changed)
    make_due(run.run_id)
    wait_until(lambda: api.get_run(run.run_id).status == "succeeded", timeout=60, message="the changed code's run")
    samples = scrape(port)
    assert samples[("durable_replay_divergences_total", (("function", "tests.changing"),))] == 1.0
    assert "executes step v1:second-renamed:0 while its journal holds" in workers.output(changed)
    assert sql("SELECT step_id FROM durable_replay_divergence WHERE run_id = %s", [run.run_id]) == [
        ("v1:second-renamed:0",)
    ]
