"""Every programmatic door, fuzzed with anything a caller can pass (tests/strategies.py).

The property, at each door: a typed error (a DurableError; Django's own
ValueError or TypeError at the Tasks backend) and nothing written, or success
and the value read back equal to what JSON makes of it. Bounded example counts
keep this module to seconds in CI; ``DURABLE_FUZZ=long`` runs the long profile
(CONTRIBUTING.md).
"""

import contextlib
import json
import math
from datetime import datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from durable_django import Concurrency, RateLimit, RetryPolicy, api, durable_function
from durable_django.checks import check_settings
from durable_django.exceptions import DurableError
from durable_django.registry import registry
from durable_django.settings_rules import known_keys, setting_problems
from durable_django.storable import json_text
from durable_django.testing import run_until_idle
from tests import strategies as S
from tests.helpers import sql

pytestmark = pytest.mark.django_db(transaction=True)

TABLES = ("durable_run", "durable_step", "durable_signal", "durable_schedule")


def rows() -> tuple[int, ...]:
    return tuple(sql(f"SELECT count(*) FROM {table}")[0][0] for table in TABLES)


def as_json(value: object) -> object:
    """What a stored value reads back as: JSON's own rendering of it (tuples become lists, keys strings)."""
    return json.loads(json_text(value, what="value"))


def refused_and_nothing_written(call, before: tuple[int, ...]) -> object:
    """Call; a typed refusal must leave every table as it was. Returns the result, or None when refused."""
    try:
        return call()
    except DurableError:
        assert rows() == before
        return None


def same_instant(stored: datetime | None, given_value: object) -> bool:
    return isinstance(given_value, datetime) and stored == given_value


enqueue_options = st.fixed_dictionaries(
    {},
    optional={
        "idempotency_key": S.names,
        "coalesce_key": S.names,
        "queue": S.names,
        "priority": S.integers,
        "delay": S.durations,
        "available_at": S.instants,
        "deadline": st.one_of(S.instants, S.durations),
        "version": S.integers,
        "tenant_id": st.one_of(S.texts, st.uuids()),
    },
)


@S.fuzz(15)
@given(name=st.one_of(st.just("tests.noop"), S.names), input=S.anything, options=enqueue_options)
def test_enqueue(name, input, options):
    before = rows()
    run = refused_and_nothing_written(lambda: api.enqueue(name, input, **options), before)
    if run is None:
        return
    stored = api.get_run(run.run_id, tenant_id=options.get("tenant_id"))
    assert stored.input == as_json(input) and stored.name == name
    assert stored.queue == options.get("queue", "default") and stored.priority == options.get("priority", 0)
    if "available_at" in options:
        assert same_instant(stored.available_at, options["available_at"])


@S.fuzz(10)
@given(inputs=st.lists(S.anything, max_size=4), keys=st.none() | st.lists(S.names, min_size=4, max_size=4))
def test_enqueue_many(inputs, keys):
    before = rows()
    keys = None if keys is None else keys[: len(inputs)]
    made = refused_and_nothing_written(lambda: api.enqueue_many("tests.noop", inputs, idempotency_keys=keys), before)
    if made is None:
        return
    first_of_key = {}
    for index, run in enumerate(made):
        key = None if keys is None else keys[index]
        expected = inputs[first_of_key.setdefault(key, index) if key is not None else index]
        assert api.get_run(run.run_id).input == as_json(expected)


@S.fuzz(10)
@given(signal=S.names, value=S.anything, occurrence=S.integers)
def test_emit_signal(signal, value, occurrence):
    run = api.enqueue("tests.noop")
    before = rows()
    delivered = refused_and_nothing_written(
        lambda: api.emit_signal(run.run_id, signal, value, occurrence=occurrence) or "delivered", before
    )
    if delivered is not None:
        stored = sql(
            "SELECT value FROM durable_signal WHERE run_id = %s AND signal = %s AND occurrence = %s",
            [run.run_id, signal, occurrence],
        )
        assert [json.loads(value) if isinstance(value, str) else value for (value,) in stored] == [as_json(value)]


@S.fuzz(10)
@given(
    schedule_id=S.names,
    cron=st.sampled_from(["0 * * * *", "@daily", "*/5 * * * *"]) | S.texts,
    tz=st.sampled_from(["UTC", "Europe/Berlin", "localtime"]) | S.texts,
    input=S.anything,
)
def test_schedule(schedule_id, cron, tz, input):
    before = rows()
    made = refused_and_nothing_written(
        lambda: api.schedule(schedule_id, "tests.noop", cron, tz=tz, input=input), before
    )
    if made is not None:
        stored = api.get_schedule(schedule_id)
        assert stored.input == as_json(input) and stored.tz == tz


@S.fuzz(10)
@given(run_id=S.names, name=st.none() | S.names, limit=S.integers, cursor=st.none() | S.texts, timeout=S.durations)
def test_lookups_and_steering(run_id, name, limit, cursor, timeout):
    before = rows()
    for call in (
        lambda: api.get_run(run_id),
        lambda: api.cancel(run_id),
        lambda: api.resume(run_id),
        lambda: api.wait_for_result(run_id, timeout=timeout),
        lambda: api.list_runs(name=name, limit=limit, cursor=cursor),
    ):
        refused_and_nothing_written(call, before)
    assert rows() == before


# What the fuzzed handler is to call, and what it saw: set by the test, read by the handler, in this thread.
CALL: dict[str, object] = {}


@durable_function("tests.fuzz.context")
def fuzzed_context(ctx, input):
    kind, args = CALL["kind"], CALL["args"]
    try:
        if kind == "step":
            CALL["returned"] = ctx.step(args["name"], lambda: args["value"], occurrence=args["occurrence"])
        elif kind == "sleep_for":
            ctx.sleep_for(args["name"], args["delay"])
        elif kind == "sleep_until":
            ctx.sleep_until(args["name"], args["when"])
        elif kind == "wait_for_signal":
            ctx.wait_for_signal(
                args["name"], args["signal"], signal_occurrence=args["occurrence"], timeout=args["delay"]
            )
        elif kind == "set_progress":
            ctx.set_progress(args["value"])
    except DurableError as exc:
        CALL["refused"] = exc
    return "done"


context_calls = st.tuples(
    st.sampled_from(["step", "sleep_for", "sleep_until", "wait_for_signal", "set_progress"]),
    st.fixed_dictionaries(
        {
            "name": S.names,
            "value": S.anything,
            "occurrence": S.integers,
            "delay": S.durations,
            "when": S.instants,
            "signal": S.names,
        }
    ),
)


@S.fuzz(15)
@given(call=context_calls)
def test_context_calls_in_a_real_handler(call):
    kind, args = call
    CALL.clear()
    CALL.update(kind=kind, args=args)
    run = api.enqueue("tests.fuzz.context")
    journal_before = rows()[1]
    run_until_idle(functions=["tests.fuzz.context"])
    after = api.get_run(run.run_id)
    if "refused" in CALL:
        assert rows()[1] == journal_before, f"{kind} refused with {CALL['refused']!r} but journalled"
        assert after.status == "succeeded" and after.output == "done"
        return
    assert after.status in ("succeeded", "waiting"), (after.status, after.error)
    if kind == "step":
        assert CALL["returned"] == as_json(args["value"])
    if kind == "set_progress":
        assert after.progress == as_json(args["value"])


@S.fuzz(15)
@given(
    version=S.integers,
    limit=S.integers,
    per=S.durations,
    max_attempts=S.integers,
    backoff=st.one_of(S.floats, S.integers),
    jitter=S.floats,
)
def test_registration_then_enqueue(version, limit, per, max_attempts, backoff, jitter):
    def handler(ctx, input):
        return None

    try:
        durable_function(
            "tests.fuzz.registered",
            version=version,
            concurrency=Concurrency(limit),
            rate_limit=RateLimit(limit, per=per),
            retry=RetryPolicy(max_attempts=max_attempts, backoff=backoff, jitter=jitter),
        )(handler)
    except DurableError:
        assert not registry.knows("tests.fuzz.registered")
        return
    try:
        run = api.enqueue("tests.fuzz.registered")  # what registers must be enqueueable: no DataError
        assert api.get_run(run.run_id).version == version
    finally:
        registry.unregister("tests.fuzz.registered")


@S.fuzz(10)
@given(args=st.lists(S.anything, max_size=2), result_id=S.texts)
def test_tasks_backend(args, result_id):
    from durable_django.contrib.tasks.compat import TaskResultDoesNotExist, normalize_json
    from tests.workflows import tasks

    before = rows()
    try:
        enqueued = tasks.add.enqueue(*args)
    except (ValueError, TypeError):
        assert rows() == before
    else:
        assert tasks.add.get_result(enqueued.id).args == as_json(normalize_json(args))  # bytes become text
    with contextlib.suppress(TaskResultDoesNotExist):  # an id no run has; else a run that has it
        tasks.add.get_result(result_id)


@S.fuzz(30)
@given(key=st.sampled_from(known_keys()) | S.texts, value=S.anything)
def test_settings_checks(settings, key, value):
    settings.DURABLE = {key: value}
    messages = check_settings()  # never raises, whatever the value
    errors = [problem for problem in setting_problems() if not problem.warning]
    assert [message.id for message in messages if message.is_serious()] == [error.check_id for error in errors] or (
        key == "SCHEDULES"  # a dict of bad entries: E007 per entry, as well
    )
    if key not in known_keys():
        assert [message.id for message in messages] == ["durable_django.W015"]
    elif not errors and key.endswith("_SECONDS"):
        seconds = value.total_seconds() if hasattr(value, "total_seconds") else value
        assert math.isfinite(seconds) and seconds > 0
