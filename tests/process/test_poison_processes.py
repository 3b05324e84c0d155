"""A value PostgreSQL refuses, written by a real worker beside innocent runs, fails only its own attempt."""

import pytest

from durable_django import api
from tests.helpers import wait_until
from tests.workflows import effects

pytestmark = [pytest.mark.process, pytest.mark.django_db(transaction=True)]

SLOTS = 24


def test_one_poisoned_step_journalled_with_23_others_at_once_re_runs_none_of_theirs(workers):
    poisoned = 7
    runs = [api.enqueue("tests.step_at_once", {"index": index, "poison": index == poisoned}) for index in range(SLOTS)]
    workers.start("--concurrency", str(SLOTS))
    # Every step has begun and waits for "go": released together, they journal at the same moment.
    wait_until(lambda: all(effects.exists(f"step-{index}") for index in range(SLOTS)), message="every step to begin")
    effects.touch("go")
    wait_until(
        lambda: all(api.get_run(run.run_id).status in ("succeeded", "failed") for run in runs),
        timeout=60,
        message="every run to end",
    )
    for index, run in enumerate(runs):
        ended = api.get_run(run.run_id)
        if index == poisoned:
            continue
        assert (ended.status, ended.output, ended.attempts) == ("succeeded", index, 1), ended
        assert effects.count(f"step-{index}") == 1  # the innocent step ran exactly once
    bad = api.get_run(runs[poisoned].run_id)
    assert bad.status == "failed" and bad.error_type == "durable_django.exceptions.StepResultNotSerializable"
    assert effects.count(f"step-{poisoned}") == bad.attempts == 2  # its own attempts, per its policy


def test_an_error_message_with_a_lone_surrogate_fails_the_run_with_its_own_error_after_one_execution(workers):
    run = api.enqueue("tests.surrogate_error", {})
    workers.start("--concurrency", "2", DURABLE_TEST_LEASE_SECONDS="2")
    wait_until(lambda: api.get_run(run.run_id).status == "failed", timeout=60, message="the run to fail")
    failed = api.get_run(run.run_id)
    assert failed.error_type == "builtins.ValueError" and "cannot read \ufffd from the file" in failed.error
    assert (failed.attempts, failed.recoveries) == (1, 0)
    assert effects.count("surrogate-error-attempt") == 1
