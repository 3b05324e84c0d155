"""Each value that used to slip past a door and reach a statement is refused at the door, and writes nothing."""

import base64
import json
from datetime import UTC, datetime, timedelta

import pytest
from django.db import transaction

from durable_django import Concurrency, RateLimit, RetryPolicy, api, durable_function
from durable_django.api import operations
from durable_django.exceptions import InvalidInput, InvalidSchedule
from durable_django.registry import registry
from durable_django.storable import MAX_NAME_CHARS, PG_INTEGER_MAX
from durable_django.testing import run_until_idle
from tests.helpers import sql

pytestmark = pytest.mark.django_db(transaction=True)

LONG = "k" * (MAX_NAME_CHARS + 1)
SURROGATE = "\udcff"  # what os.fsdecode() makes of the byte 0xff
FAR = datetime(9999, 12, 31, tzinfo=UTC)
EARLY = datetime(1, 1, 1, tzinfo=UTC)
TABLES = ("durable_run", "durable_step", "durable_signal", "durable_schedule")


def count_rows() -> dict[str, int]:
    return {table: sql(f"SELECT count(*) FROM {table}")[0][0] for table in TABLES}


NOTHING = dict.fromkeys(TABLES, 0)


@pytest.mark.parametrize(
    "call",
    [
        lambda: api.enqueue("tests.noop", available_at=FAR),
        lambda: api.enqueue("tests.noop", available_at=EARLY),
        lambda: api.enqueue("tests.noop", deadline=FAR),
        lambda: api.enqueue("tests.noop", idempotency_key=LONG),
        lambda: api.enqueue("tests.noop", coalesce_key=LONG),
        lambda: api.enqueue("tests.noop", queue=LONG),
        lambda: api.enqueue("tests." + LONG),
        lambda: api.enqueue("tests.noop", {"path": f"/tmp/{SURROGATE}"}),
        lambda: api.enqueue("tests.noop", {f"key{SURROGATE}": 1}),
        lambda: api.enqueue("tests.noop", idempotency_key=f"k{SURROGATE}"),
        lambda: api.enqueue("tests.noop", queue=f"q{SURROGATE}"),
        lambda: api.enqueue("tests.noop", version=2**31),
        lambda: api.enqueue_many("tests.noop", [{}, {"bad": SURROGATE}]),
        lambda: api.enqueue_many("tests.noop", [{}, {"bad": SURROGATE}], idempotency_keys=["same", "same"]),
        lambda: api.enqueue_many("tests.noop", [{}], idempotency_keys=[LONG]),
        lambda: api.schedule(LONG, "tests.noop", "0 * * * *"),
        lambda: api.schedule("s", "tests.noop", "0 * * * *", input={"bad": SURROGATE}),
        lambda: api.get_run(LONG),
        lambda: api.get_run(f"run{SURROGATE}"),
        lambda: api.cancel(f"run{SURROGATE}"),
        lambda: api.list_runs(name=LONG),
        lambda: operations.health(max_oldest_pending=float("nan")),
    ],
    ids=[
        "available-at-9999",
        "available-at-year-1",
        "deadline-9999",
        "idempotency-key-long",
        "coalesce-key-long",
        "queue-long",
        "name-long",
        "input-surrogate",
        "input-key-surrogate",
        "idempotency-key-surrogate",
        "queue-surrogate",
        "version-past-integer",
        "enqueue-many-surrogate",
        "enqueue-many-surrogate-at-a-repeated-key",
        "enqueue-many-key-long",
        "schedule-id-long",
        "schedule-input-surrogate",
        "get-run-long",
        "get-run-surrogate",
        "cancel-surrogate",
        "list-runs-name-long",
        "health-nan",
    ],
)
def test_what_postgresql_cannot_store_is_invalid_input_and_writes_nothing(call):
    with pytest.raises(InvalidInput):
        call()
    assert count_rows() == NOTHING


def test_an_instant_far_ahead_but_within_a_hundred_years_is_kept():
    when = datetime.now(UTC) + timedelta(days=99 * 365)
    run = api.enqueue("tests.noop", available_at=when)
    assert api.get_run(run.run_id).available_at == when


def test_a_signal_past_integer_or_with_a_long_or_surrogate_name_is_refused_and_stores_nothing():
    run = api.enqueue("tests.signal_waiter", {})
    before = count_rows()
    for call in (
        lambda: api.emit_signal(run.run_id, "approval", "yes", occurrence=2**31),
        lambda: api.emit_signal(run.run_id, LONG, "yes"),
        lambda: api.emit_signal(run.run_id, f"approval{SURROGATE}", "yes"),
        lambda: api.emit_signal(run.run_id, "approval", {"by": SURROGATE}),
    ):
        with pytest.raises(InvalidInput):
            call()
    assert count_rows() == before
    assert api.emit_signal(run.run_id, "approval", "yes", occurrence=PG_INTEGER_MAX) == "yes"


REFUSED_NAMES = {
    f"tests.sv.{name}" for name in ("version", "concurrency", "rate", "retry", "nan", "jitter", "per", "newline\n")
}


@pytest.mark.parametrize(
    "register",
    [
        lambda fn: durable_function("tests.sv.version", version=2**31)(fn),
        lambda fn: durable_function("tests.sv.concurrency", concurrency=Concurrency(2**31))(fn),
        lambda fn: durable_function("tests.sv.rate", rate_limit=RateLimit(2**31, per=1))(fn),
        lambda fn: durable_function("tests.sv.retry", retry=RetryPolicy(max_attempts=2**31))(fn),
        lambda fn: durable_function("tests.sv.nan", retry=RetryPolicy(backoff=float("nan")))(fn),
        lambda fn: durable_function("tests.sv.jitter", retry=RetryPolicy(jitter=float("nan")))(fn),
        lambda fn: durable_function("tests.sv.per", rate_limit=RateLimit(5, per=float("nan")))(fn),
        lambda fn: durable_function("tests.sv.newline\n")(fn),
    ],
    ids=["version", "concurrency", "rate-limit", "max-attempts", "backoff-nan", "jitter-nan", "per-nan", "newline"],
)
def test_registration_refuses_what_no_run_could_store(register):
    def handler(ctx, input):
        return None

    with pytest.raises(InvalidInput):
        register(handler)
    assert not set(registry.names()) & REFUSED_NAMES


def test_a_concurrency_key_longer_than_a_name_is_invalid_input_and_writes_nothing():
    @durable_function("tests.sv.keyed", concurrency=Concurrency(1, key=lambda input: input["customer"]))
    def keyed(ctx, input):
        return None

    try:
        with pytest.raises(InvalidInput):
            api.enqueue("tests.sv.keyed", {"customer": LONG})
        assert count_rows() == NOTHING
    finally:
        registry.unregister("tests.sv.keyed")


EFFECTS: list[str] = []


@durable_function("tests.sv.long_step")
def long_step(ctx, input):
    try:
        ctx.step(LONG, lambda: EFFECTS.append("charged"))
    except InvalidInput as exc:
        return {"refused": str(exc)}
    return {"refused": None}


def test_a_step_name_over_the_limit_is_refused_before_its_side_effect_runs():
    EFFECTS.clear()
    run = api.enqueue("tests.sv.long_step")
    run_until_idle(functions=["tests.sv.long_step"])
    output = api.get_run(run.run_id).output
    assert EFFECTS == [] and "at most 512 characters" in output["refused"]
    assert sql("SELECT count(*) FROM durable_step")[0][0] == 0


@durable_function("tests.sv.signal_past_integer")
def signal_past_integer(ctx, input):
    try:
        ctx.wait_for_signal("wait", "approval", signal_occurrence=2**31)
    except InvalidInput:
        return "refused"
    return "waited"


def test_waiting_for_a_signal_occurrence_nobody_can_send_is_refused():
    run = api.enqueue("tests.sv.signal_past_integer")
    run_until_idle(functions=["tests.sv.signal_past_integer"])
    assert api.get_run(run.run_id).output == "refused"


def forged(payload: object) -> str:
    return base64.urlsafe_b64encode(json.dumps(payload).encode()).decode().rstrip("=")


def deep(depth: int) -> str:
    return base64.urlsafe_b64encode(("[" * depth + "]" * depth).encode()).decode()


@pytest.mark.parametrize(
    "cursor",
    [
        deep(100_000),
        forged(["2026-01-01T00:00:00+00:00", f"run{SURROGATE}"]),
        forged(["2026-01-01T00:00:00", "run"]),
        forged(["0001-01-01T00:00:00+00:00", "run"]),
        forged(["2026-01-01T00:00:00+00:00", LONG]),
        f"abc{SURROGATE}",
        "x" * 100_000,
    ],
    ids=["deep", "surrogate", "naive", "year-1", "long-run-id", "surrogate-token", "huge-token"],
)
def test_a_forged_cursor_is_invalid_input(cursor):
    api.enqueue("tests.noop")
    with pytest.raises(InvalidInput, match="invalid cursor"):
        api.list_runs(cursor=cursor)


def test_a_real_cursor_still_pages():
    for _ in range(3):
        api.enqueue("tests.noop")
    first = api.list_runs(limit=2)
    second = api.list_runs(limit=2, cursor=first.next_cursor)
    assert len(first.items) == 2 and len(second.items) == 1


@pytest.mark.parametrize("tz", ["localtime", "posixrules", "Europe", "UTC\x00", f"UTC{SURROGATE}", 5])
def test_a_zone_must_be_an_iana_name(tz):
    with pytest.raises(InvalidSchedule):
        api.schedule("s", "tests.noop", "0 * * * *", tz=tz)
    assert count_rows() == NOTHING


def test_an_input_over_max_value_bytes_is_invalid_input(settings):
    settings.DURABLE = {**settings.DURABLE, "MAX_VALUE_BYTES": 1024}
    with pytest.raises(InvalidInput, match="MAX_VALUE_BYTES"):
        api.enqueue("tests.noop", "x" * 1025)
    assert count_rows() == NOTHING
    assert api.enqueue("tests.noop", "é" * 500).input == "é" * 500  # 1,002 bytes of JSON


def test_refused_values_leave_the_callers_transaction_usable():
    with transaction.atomic():
        kept = api.enqueue("tests.noop", {"a": 1})
        with pytest.raises(InvalidInput):
            api.enqueue("tests.noop", {"bad": SURROGATE})
        with pytest.raises(InvalidInput):
            api.enqueue("tests.noop", idempotency_key=LONG)
        also = api.enqueue("tests.noop", {"b": 2})
    assert {api.get_run(kept.run_id).input["a"], api.get_run(also.run_id).input["b"]} == {1, 2}


@pytest.mark.parametrize("number", [9.359680024635014e16, 1e16, 1e308, -1.5e300, 5e-324, 1e-7])
def test_a_float_reads_back_as_the_same_float(number):
    """jsonb keeps the scale a number was written with: a float in exponent notation read back as an int."""
    run = api.enqueue("tests.noop", {"x": number, "e+ in a string": "1e+20"})
    stored = api.get_run(run.run_id).input
    assert stored == {"x": number, "e+ in a string": "1e+20"} and type(stored["x"]) is float


@durable_function("tests.sv.undecodable_error", retry=RetryPolicy(max_attempts=1))
def undecodable_error(ctx, input):
    raise FileNotFoundError(f"no such file: /data/report-{SURROGATE}.csv\x00")


def test_an_error_text_with_a_lone_surrogate_or_nul_is_stored_with_u_fffd_and_its_class():
    run = api.enqueue("tests.sv.undecodable_error")
    run_until_idle(functions=["tests.sv.undecodable_error"])
    failed = api.get_run(run.run_id)
    assert failed.status == "failed" and failed.error_type == "builtins.FileNotFoundError"
    assert "no such file: /data/report-\ufffd.csv\ufffd" in failed.error


def test_a_batch_larger_than_one_jsonb_value_is_invalid_input_and_writes_nothing(monkeypatch):
    from durable_django.engine import submit_many

    # The batch travels as one jsonb array (at most 255 MiB): a smaller bound stands for it here.
    monkeypatch.setattr(submit_many, "JSONB_MAX_BYTES", 3_000)
    with pytest.raises(InvalidInput, match="smaller batches"):
        api.enqueue_many("tests.noop", ["x" * 1_000] * 3)
    assert count_rows() == NOTHING
    assert len(api.enqueue_many("tests.noop", ["x" * 1_000] * 2)) == 2
