import pytest

from durable_django import api
from durable_django.testing import make_due, run_until_idle
from tests.helpers import sql
from tests.workflows import effects

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_two_step_run_succeeds_with_its_output_and_journal(effects_dir):
    run = api.enqueue("tests.two_steps", {})
    assert run_until_idle() == 1
    done = api.get_run(run.run_id)
    assert (done.status, done.output, done.attempts) == ("succeeded", ["one", "two"], 1)
    assert sql("SELECT step_id, result::text FROM durable_step ORDER BY step_id") == [
        ("v1:first:0", '"one"'),
        ("v1:second:0", '"two"'),
    ]


def test_falsy_step_results_replay_from_the_journal_without_running_again(effects_dir):
    run = api.enqueue("tests.falsy_steps", {})
    run_until_idle()
    make_due(run.run_id)  # the retry's backoff passes
    run_until_idle()
    done = api.get_run(run.run_id)
    assert done.status == "succeeded", done.error
    assert done.output == [None, 0, "", [], False]
    assert done.attempts == 2 and done.failures == 1
    assert effects.count("falsy") == 5  # each step ran once, the retry replayed all five


def test_a_step_result_that_is_not_json_fails_the_attempt_naming_the_step(effects_dir):
    run = api.enqueue("tests.unserialisable", {})
    run_until_idle()
    failed = api.get_run(run.run_id)
    assert failed.error_type == "durable_django.exceptions.StepResultNotSerializable"
    assert "step 'bad'" in failed.error
    assert sql("SELECT count(*) FROM durable_step") == [(0,)]


def test_an_async_function_completes_with_its_steps():
    run = api.enqueue("tests.async", {"x": 7})
    run_until_idle()
    done = api.get_run(run.run_id)
    assert (done.status, done.output) == ("succeeded", {"doubled": 14, "tripled": 21})
    assert sql("SELECT count(*) FROM durable_step WHERE run_id = %s", [run.run_id]) == [(2,)]


def test_idempotency_key_is_stable_per_run_version_step_and_occurrence():
    from durable_django.engine.attempt import Attempt
    from durable_django.engine.context import Context
    from durable_django.types import ClaimedRun

    run = api.enqueue("tests.noop", {})
    ctx = Context(Attempt(ClaimedRun(run=run, token=1, journal={}, recovered=False), None))
    assert ctx.idempotency_key("charge-card") == f"{run.run_id}:1:charge-card:0"
    assert ctx.idempotency_key("charge-card", 3) == f"{run.run_id}:1:charge-card:3"


def test_a_failing_function_is_retried_with_backoff_then_fails_with_its_traceback(effects_dir):

    run = api.enqueue("tests.always_fails", {})
    run_until_idle()
    first = api.get_run(run.run_id)
    assert first.status == "pending" and first.failures == 1
    assert first.available_at > first.updated_at  # backoff: not claimable at once (a loaded machine may pass
    # its 0.2 s before a second drain, so no drain here asserts that it claims nothing)
    for _ in range(2):
        make_due(run.run_id)  # the backoff passes
        run_until_idle()
    failed = api.get_run(run.run_id)
    assert failed.status == "failed" and failed.failures == 3 and failed.attempts == 3
    assert failed.error_type == "builtins.KeyError"
    assert "Traceback" in failed.error and "broken on purpose" in failed.error
    assert effects.count("always-fails") == 3


def test_the_snapshotted_retry_policy_governs_retries_after_a_redeploy():
    from durable_django.registry import registry
    from durable_django.types import RetryPolicy

    run = api.enqueue("tests.always_fails", {})
    registration = registry.get("tests.always_fails", 1)
    registry.unregister("tests.always_fails", 1)
    registry.register("tests.always_fails", 1, registration.fn, RetryPolicy(max_attempts=1))
    try:
        run_until_idle()
    finally:
        registry.unregister("tests.always_fails", 1)
        registry.register("tests.always_fails", 1, registration.fn, registration.retry)
    assert api.get_run(run.run_id).status == "pending"  # the run's own policy allows 3 attempts
