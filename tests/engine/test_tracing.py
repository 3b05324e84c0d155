"""OpenTelemetry: attempt and step spans in the trace of the code that enqueued, through the SDK's in-memory exporter.

The runs execute in this process (``run_until_idle``); tests/process/test_observability_processes.py
follows a trace across worker processes and a SIGKILL.
"""

import pytest
from opentelemetry import trace
from opentelemetry.trace import StatusCode

from durable_django import api, enqueue_many
from durable_django.testing import claim, make_due, run_until_idle
from tests.spans import as_dict

pytestmark = pytest.mark.django_db(transaction=True)

TENANT = "3b9e3c1a-1a2b-4c3d-8e4f-5a6b7c8d9e0f"


def finished(exporter) -> list[dict]:
    return [as_dict(span) for span in exporter.get_finished_spans()]


def named(spans, name) -> list[dict]:
    return [span for span in spans if span["name"] == name]


def traced_enqueue(*args, **kwargs):
    """Enqueue inside a span of the caller's own; returns (run, that span's context)."""
    with trace.get_tracer("tests").start_as_current_span("request") as request:
        run = api.enqueue(*args, **kwargs)
    context = request.get_span_context()
    return run, f"{context.trace_id:032x}", f"{context.span_id:016x}"


def test_an_enqueue_inside_a_span_puts_the_attempt_and_its_steps_in_that_trace(spans):
    run, trace_id, request_span = traced_enqueue("tests.two_steps", {"second_sleep": 0}, queue="reports")
    assert api.get_run(run.run_id).trace_context["traceparent"].startswith(f"00-{trace_id}-{request_span}-")
    run_until_idle()
    exported = finished(spans)
    [attempt] = named(exported, "durable.attempt tests.two_steps")
    assert attempt["trace_id"] == trace_id and attempt["parent_id"] == request_span
    assert attempt["attributes"] == {
        "durable.run_id": run.run_id,
        "durable.function": "tests.two_steps",
        "durable.version": 1,
        "durable.attempt": 1,
        "durable.queue": "reports",
        "durable.outcome": "succeeded",
    }
    assert "durable.tenant_id" not in attempt["attributes"]
    assert attempt["status"] == "UNSET" and attempt["events"] == []
    steps = [span for span in exported if span["name"].startswith("durable.step ")]
    assert [span["name"] for span in steps] == ["durable.step first", "durable.step second"]
    assert all(span["trace_id"] == trace_id and span["parent_id"] == attempt["span_id"] for span in steps)
    assert steps[0]["attributes"]["durable.step"] == "first"


def test_a_run_enqueued_outside_any_span_starts_a_trace_of_its_own(spans):
    run = api.enqueue("tests.noop", {}, tenant_id=TENANT)
    assert api.get_run(run.run_id).trace_context is None
    run_until_idle()
    [attempt] = named(finished(spans), "durable.attempt tests.noop")
    assert attempt["parent_id"] is None
    assert attempt["attributes"]["durable.tenant_id"] == TENANT


def test_a_failing_attempt_records_its_exception_and_the_last_one_is_failed(spans):
    run, trace_id, _ = traced_enqueue("tests.always_fails", {})
    for _ in range(3):
        run_until_idle()
        if api.get_run(run.run_id).status == "pending":
            make_due(run.run_id)
    assert api.get_run(run.run_id).status == "failed"
    attempts = named(finished(spans), "durable.attempt tests.always_fails")
    assert [span["attributes"]["durable.outcome"] for span in attempts] == ["retrying", "retrying", "failed"]
    assert [span["attributes"]["durable.attempt"] for span in attempts] == [1, 2, 3]
    assert {span["trace_id"] for span in attempts} == {trace_id}
    for span in attempts:
        assert span["status"] == StatusCode.ERROR.name
        [event] = span["events"]
        assert event["name"] == "exception"
        assert event["attributes"]["exception.type"] == "KeyError"
        assert "broken on purpose" in event["attributes"]["exception.message"]
        assert "Traceback" in event["attributes"]["exception.stacktrace"]


def test_a_replayed_step_is_an_event_on_the_attempt_not_a_span(spans):
    run, trace_id, _ = traced_enqueue("tests.sleeper", {"seconds": 3600})
    run_until_idle()
    make_due(run.run_id)
    run_until_idle()
    assert api.get_run(run.run_id).status == "succeeded"
    exported = finished(spans)
    first, second = named(exported, "durable.attempt tests.sleeper")
    assert first["attributes"]["durable.outcome"] == "suspended" and first["events"] == []
    assert second["attributes"]["durable.outcome"] == "succeeded"
    assert second["events"] == [{"name": "durable.step.replayed", "attributes": {"durable.step": "before"}}]
    steps = [(span["name"], span["parent_id"]) for span in exported if span["name"].startswith("durable.step ")]
    assert steps == [("durable.step before", first["span_id"]), ("durable.step after", second["span_id"])]
    assert {span["trace_id"] for span in exported} == {trace_id}


def test_a_child_runs_attempt_is_a_child_of_the_parents_attempt_that_spawned_it(spans):
    run, trace_id, _ = traced_enqueue("tests.parent", {})
    run_until_idle()
    assert api.get_run(run.run_id).status == "succeeded"
    exported = finished(spans)
    parents = named(exported, "durable.attempt tests.parent")
    [child] = named(exported, "durable.attempt tests.child")
    assert [span["attributes"]["durable.outcome"] for span in parents] == ["suspended", "succeeded"]
    assert child["trace_id"] == trace_id and child["parent_id"] == parents[0]["span_id"]


@pytest.mark.parametrize("function", ["tests.fan_out", "tests.async_fan_out"])
def test_children_spawned_together_are_children_of_the_attempt_that_spawned_them(spans, function):
    run, trace_id, _ = traced_enqueue(function, {"n": 3})
    run_until_idle()
    assert api.get_run(run.run_id).status == "succeeded"
    exported = finished(spans)
    spawner = named(exported, f"durable.attempt {function}")[0]
    children = named(exported, "durable.attempt tests.child")
    assert len(children) == 3
    assert {(span["trace_id"], span["parent_id"]) for span in children} == {(trace_id, spawner["span_id"])}


def test_a_batch_enqueued_inside_a_span_joins_its_trace(spans):
    with trace.get_tracer("tests").start_as_current_span("request") as request:
        runs = enqueue_many("tests.noop", [{"n": 0}, {"n": 1}])
    context = request.get_span_context()
    traceparent = f"00-{context.trace_id:032x}-{context.span_id:016x}-"
    assert all(run.trace_context["traceparent"].startswith(traceparent) for run in runs)  # as returned
    assert all(api.get_run(run.run_id).trace_context == run.trace_context for run in runs)  # as stored
    run_until_idle()
    attempts = named(finished(spans), "durable.attempt tests.noop")
    assert {(span["trace_id"], span["parent_id"]) for span in attempts} == {
        (f"{context.trace_id:032x}", f"{context.span_id:016x}")
    }


def test_spans_of_an_async_function_and_of_code_inside_a_step_nest_under_their_step(spans):
    run, trace_id, _ = traced_enqueue("tests.async", {"x": 2})
    traced, _, _ = traced_enqueue("tests.traced_step", {})
    run_until_idle()
    assert api.get_run(run.run_id).output == {"doubled": 4, "tripled": 6}
    exported = finished(spans)
    [attempt] = named(exported, "durable.attempt tests.async")
    steps = [span for span in exported if span["trace_id"] == trace_id and span["name"].startswith("durable.step ")]
    assert sorted(span["name"] for span in steps) == ["durable.step double", "durable.step triple"]
    assert {span["parent_id"] for span in steps} == {attempt["span_id"]}
    [step] = named(exported, "durable.step work")
    [inner] = named(exported, "inside the step")
    assert inner["parent_id"] == step["span_id"] and api.get_run(traced.run_id).output == "traced"


def test_a_run_whose_cancel_came_while_nobody_held_it_ends_a_cancelled_attempt(spans):
    run, _, _ = traced_enqueue("tests.slow", {"seconds": 60})
    claim(functions=["tests.slow"])
    assert api.cancel(run.run_id) == "requested"
    make_due(run.run_id)  # its holder died
    run_until_idle()
    assert api.get_run(run.run_id).status == "cancelled"
    [attempt] = named(finished(spans), "durable.attempt tests.slow")
    assert attempt["attributes"]["durable.outcome"] == "cancelled" and attempt["attributes"]["durable.attempt"] == 2
