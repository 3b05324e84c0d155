"""A fork on real worker processes: a SIGKILL while the fork runs past its replayed prefix loses nothing."""

import os
import signal

import pytest

from durable_django import api
from tests.helpers import sql, wait_until
from tests.workflows import effects

pytestmark = [pytest.mark.process, pytest.mark.django_db(transaction=True)]

SHORT_LEASE = {"DURABLE_TEST_LEASE_SECONDS": "2", "DURABLE_TEST_POLL_SECONDS": "0.5"}


def journal(run_id):
    return dict(sql("SELECT step_id, result::text FROM durable_step WHERE run_id = %s", [run_id]))


def test_a_sigkill_mid_fork_replay_is_recovered_by_another_worker_with_the_copied_steps_never_run_again(workers):
    effects.touch("forkable-c-broken")
    original = api.enqueue("tests.forkable", {"c_seconds": 4}, version=1)
    first = workers.start("--concurrency", "2", **SHORT_LEASE)
    workers.wait_started(first)
    wait_until(lambda: api.get_run(original.run_id).status == "failed", timeout=60, message="the original to fail")
    os.remove(effects._path("forkable-c-broken"))
    before = journal(original.run_id)
    fork = api.fork(original.run_id, from_step="b")
    # The fork replays a and its child, executes b, and is killed inside c.
    wait_until(lambda: effects.exists(f"forkable-c-started-{fork.run_id}"), timeout=60, message="the fork inside c")
    first.send_signal(signal.SIGKILL)
    first.wait(30)
    second = workers.start("--concurrency", "2", **SHORT_LEASE)
    workers.wait_started(second)
    wait_until(lambda: api.get_run(fork.run_id).status == "succeeded", timeout=90, message="the fork to finish")
    done = api.get_run(fork.run_id)
    assert done.recoveries == 1 and done.attempts == 2
    assert done.output["a"] == "a" and done.output["b"] == "b" and done.output["c"] == "c1"
    # a ran once in all (the original's), b once in the original and once in the fork (journalled before the
    # kill, so replayed after it), c only in the fork's second attempt (the killed one journalled nothing).
    assert (effects.count("forkable-a"), effects.count("forkable-b"), effects.count("forkable-c")) == (1, 2, 1)
    assert sorted(journal(fork.run_id)) == ["v1:a:0", "v1:b:0", "v1:c:0", "v1:child:0", "v1:wait-child:0"]
    assert journal(fork.run_id)["v1:child:0"] == before["v1:child:0"]
    assert journal(original.run_id) == before and api.get_run(original.run_id).status == "failed"
