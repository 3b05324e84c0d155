"""PostgreSQL cannot store NUL: the API refuses it, handlers' NULs fail their run clearly, nothing is poisoned."""

import pytest

from durable_django import api
from durable_django.engine import lifecycle
from durable_django.exceptions import InvalidInput
from durable_django.testing import run_until_idle
from tests.helpers import sql
from tests.store.factories import claim
from tests.workflows import effects

pytestmark = pytest.mark.django_db(transaction=True)

NUL = "\x00"


def count_rows() -> tuple:
    return tuple(sql(f"SELECT count(*) FROM {table}")[0][0] for table in ("durable_run", "durable_signal"))


@pytest.mark.parametrize(
    "call",
    [
        lambda: api.enqueue("tests.noop", {"text": f"a{NUL}b"}),
        lambda: api.enqueue("tests.noop", {f"key{NUL}": 1}),
        lambda: api.enqueue("tests.noop", [["deep", [f"{NUL}"]]]),
        lambda: api.enqueue("tests.noop", {}, idempotency_key=f"k{NUL}"),
        lambda: api.enqueue("tests.noop", {}, coalesce_key=f"c{NUL}"),
        lambda: api.enqueue("tests.noop", {}, queue=f"q{NUL}"),
        lambda: api.enqueue(f"tests.noop{NUL}", {}),
        lambda: api.get_run(f"run{NUL}"),
        lambda: api.cancel(f"run{NUL}"),
        lambda: api.resume(f"run{NUL}"),
        lambda: api.wait_for_result(f"run{NUL}", timeout=1),
        lambda: api.list_runs(name=f"tests{NUL}"),
    ],
    ids=[
        "input",
        "input-key",
        "nested",
        "idempotency-key",
        "coalesce-key",
        "queue",
        "name",
        "get",
        "cancel",
        "resume",
        "wait",
        "list",
    ],
)
def test_a_nul_anywhere_a_caller_passes_text_or_json_is_invalid_input_and_writes_nothing(call):
    with pytest.raises(InvalidInput, match=r"NUL|invalid durable function name"):
        call()
    assert count_rows() == (0, 0)


def test_a_nul_in_a_signal_name_or_value_is_invalid_input_and_stores_no_signal():
    run = api.enqueue("tests.signal_waiter", {})
    for name, value in ((f"app{NUL}roval", "yes"), ("approval", {"by": f"o{NUL}ps"})):
        with pytest.raises(InvalidInput, match="NUL"):
            api.emit_signal(run.run_id, name, value)
    assert count_rows() == (1, 0)


def test_a_json_escape_that_only_looks_like_a_nul_is_accepted():
    run = api.enqueue("tests.noop", {"text": "\\u0000", "also": "\\\\u0000"})
    assert api.get_run(run.run_id).input == {"text": "\\u0000", "also": "\\\\u0000"}


def test_an_output_holding_a_nul_fails_each_attempt_clearly_and_is_retried_per_policy(effects_dir):
    run = api.enqueue("tests.nul_output", {})
    for _ in range(10):
        run_until_idle()
        if api.get_run(run.run_id).status == "failed":
            break
        sql("UPDATE durable_run SET available_at = now() WHERE run_id = %s", [run.run_id])
    failed = api.get_run(run.run_id)
    assert (failed.status, failed.failures) == ("failed", 3)
    assert failed.error_type == "durable_django.exceptions.InvalidInput"
    assert "holds a NUL character" in failed.error
    assert effects.count("nul-output-attempt") == 3


def test_a_step_result_holding_a_nul_fails_the_attempt_with_the_step_named():
    run = api.enqueue("tests.nul_step", {})
    run_until_idle()
    failed = api.get_run(run.run_id)
    assert failed.error_type == "durable_django.exceptions.StepResultNotSerializable"
    assert "step 'poison'" in failed.error and "NUL" in failed.error


def test_an_exception_message_holding_a_nul_is_kept_with_a_replacement_character():
    run = api.enqueue(
        "tests.nul_error",
        {},
    )
    sql("UPDATE durable_run SET retry_policy = '{\"max_attempts\": 1}' WHERE run_id = %s", [run.run_id])
    run_until_idle()
    failed = api.get_run(run.run_id)
    assert (failed.status, failed.error_type) == ("failed", "builtins.ValueError")
    assert "ValueError: a message with a NUL: \ufffd in it" in failed.error


def test_a_batch_landing_the_database_refuses_lands_each_run_alone_and_fails_only_the_bad_one():
    """A real refusal: a trigger rejects one run's output, as any constraint or limit of a real server could."""
    runs = [api.enqueue("tests.noop", {"n": n}) for n in range(5)]
    sql("""
        CREATE FUNCTION refuse_poison() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF NEW.output = '"poison"'::jsonb THEN RAISE EXCEPTION 'this output is refused'; END IF;
            RETURN NEW;
        END $$;
        CREATE TRIGGER refuse_poison BEFORE UPDATE ON durable_run FOR EACH ROW EXECUTE FUNCTION refuse_poison();
    """)
    try:
        attempts = lifecycle.claim(
            limit=5,
            start_now=5,
            worker_id="batch",
            bounds=lifecycle.claim_bounds(functions=None, queues=None, tenant_id=None),
        )
        batch = [(attempt, '"poison"' if index == 2 else f'{{"n": {index}}}') for index, attempt in enumerate(attempts)]
        report = lifecycle.land_successes(batch)
    finally:
        sql("DROP TRIGGER refuse_poison ON durable_run; DROP FUNCTION refuse_poison()")
    assert report.retry == []
    assert sorted(outcome.value for outcome in report.outcomes.values()) == ["failed"] + ["succeeded"] * 4
    poisoned = api.get_run(attempts[2].run.run_id)
    assert (poisoned.status, poisoned.error_type) == ("failed", "durable_django.exceptions.OutputNotStored")
    assert "this output is refused" in poisoned.error
    assert {api.get_run(run.run_id).status for run in runs} == {"succeeded", "failed"}
    assert claim() == []


def test_an_error_the_database_refuses_to_store_still_lands_the_attempt_failed_with_its_class():
    """A real refusal of the error's text (a trigger, as a constraint of a real server could): the attempt
    lands failed all the same, its class kept, rather than left for its lease to run out and be reclaimed."""
    run = api.enqueue("tests.nul_error", {})
    sql("UPDATE durable_run SET retry_policy = '{\"max_attempts\": 1}' WHERE run_id = %s", [run.run_id])
    sql("""
        CREATE FUNCTION refuse_error() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF strpos(NEW.error, 'a message with a NUL') > 0 THEN RAISE EXCEPTION 'this error is refused'; END IF;
            RETURN NEW;
        END $$;
        CREATE TRIGGER refuse_error BEFORE UPDATE ON durable_run FOR EACH ROW EXECUTE FUNCTION refuse_error();
    """)
    try:
        run_until_idle()
    finally:
        sql("DROP TRIGGER refuse_error ON durable_run; DROP FUNCTION refuse_error()")
    failed = api.get_run(run.run_id)
    assert (failed.status, failed.error_type, failed.attempts) == ("failed", "builtins.ValueError", 1)
    assert "the error's text could not be stored (django.db.utils.ProgrammingError)" in failed.error


def test_an_output_the_database_refuses_fails_its_own_run_with_an_invalid_input_error():
    from durable_django.exceptions import InvalidInput, OutputNotStored

    # The storable domain refuses the output before any write: the attempt fails, retried per its policy.
    run = api.enqueue("tests.surrogate_output", {})
    run_until_idle()
    failed = api.get_run(run.run_id)
    # (Under load the 0.2 s retry may come due within the same run_until_idle.)
    assert failed.error_type == "durable_django.exceptions.InvalidInput" and "lone surrogate" in failed.error
    assert failed.status == ("failed" if failed.attempts == 2 else "pending")
    assert issubclass(OutputNotStored, InvalidInput)
    assert effects.count("surrogate-output-attempt") == failed.attempts


def test_progress_the_database_refuses_is_invalid_input_in_the_handler():
    run = api.enqueue("tests.surrogate_progress", {})
    run_until_idle()
    assert api.get_run(run.run_id).output == {"refused": "InvalidInput"}
