"""Fixture workflows, autodiscovered like any app's durable.py."""

import asyncio
import json
import os
import time
import uuid
from datetime import timedelta

from durable_django import Concurrency, RateLimit, RetryPolicy, durable_function

from . import effects

FAST_RETRY = RetryPolicy(max_attempts=3, initial_delay=0.2, max_delay=1.0, backoff=2.0, jitter=0.0)


@durable_function("tests.noop")
def noop(ctx, input):
    return input


@durable_function("tests.two_steps")
def two_steps(ctx, input):
    first = ctx.step("first", lambda: effects.record("first", ctx.run_id) or "one")

    def second():
        effects.record("second-started", ctx.run_id)
        effects.touch("in-second")
        time.sleep(input.get("second_sleep", 0))
        return "two"

    second_value = ctx.step("second", second)
    return [first, second_value]


@durable_function("tests.flaky", retry=FAST_RETRY)
def flaky(ctx, input):
    effects.record("flaky-attempt", str(ctx.attempt))
    if ctx.attempt < input["succeed_on"]:
        raise ValueError(f"attempt {ctx.attempt} fails on purpose")
    return {"attempt": ctx.attempt}


@durable_function("tests.always_fails", retry=FAST_RETRY)
def always_fails(ctx, input):
    effects.record("always-fails", str(ctx.attempt))
    raise KeyError("broken on purpose")


@durable_function("tests.versioned", version=2)
def versioned_v2(ctx, input):
    return {"version": 2}


if not os.environ.get("DURABLE_TEST_WITHOUT_V1"):

    @durable_function("tests.versioned", version=1)
    def versioned_v1(ctx, input):
        return {"version": 1}


@durable_function("tests.async")
async def async_workflow(ctx, input):
    async def fetch():
        await asyncio.sleep(0)
        return input["x"] * 2

    doubled = await ctx.step("double", fetch)
    tripled = await ctx.step("triple", lambda: input["x"] * 3)
    return {"doubled": doubled, "tripled": tripled}


@durable_function("tests.slow")
def slow(ctx, input):
    effects.touch(f"slow-started-{input.get('tag', '')}")
    time.sleep(input["seconds"])
    effects.record("slow-finished", ctx.run_id)
    return "slept"


@durable_function("tests.falsy_steps")
def falsy_steps(ctx, input):
    values = [
        ctx.step(f"s{i}", lambda v=v: effects.record("falsy", repr(v)) or v)
        for i, v in enumerate([None, 0, "", [], False])
    ]
    if ctx.attempt == 1:
        raise RuntimeError("fail after journalling, so the retry replays")
    return values


@durable_function("tests.unserialisable")
def unserialisable(ctx, input):
    ctx.step("bad", lambda: object())
    return "unreachable"


@durable_function("tests.many_steps")
def many_steps(ctx, input):
    for index in range(input["steps"]):
        ctx.step("noop", lambda: index, occurrence=index)
    return input["steps"]


@durable_function("tests.sleeper")
def sleeper(ctx, input):
    ctx.step("before", lambda: effects.record("before-sleep", ctx.run_id) or "before")
    ctx.sleep_for("nap", input["seconds"])
    return ctx.step("after", lambda: effects.record("after-sleep", ctx.run_id) or "after")


@durable_function("tests.signal_waiter")
def signal_waiter(ctx, input):
    value = ctx.wait_for_signal("wait", "approval", timeout=input.get("timeout"), default="no answer")
    return {"approval": value}


@durable_function("tests.child")
def child(ctx, input):
    if input.get("fail") or (input.get("fail_first") and ctx.run.failures == 0):
        raise ValueError("child failed on purpose")
    if input.get("wait_signal"):
        ctx.wait_for_signal("hold", "go")
    time.sleep(input.get("pause", 0))
    effects.record("child-ran", ctx.run_id)
    return {"child_of": input.get("parent"), "value": input.get("value")}


@durable_function("tests.parent")
def parent(ctx, input):
    child_id = ctx.spawn("spawn-child", "tests.child", {"parent": ctx.run_id, **input.get("child", {})})
    effects.record("spawned", child_id)
    if input.get("pause_after_spawn"):
        effects.touch("spawned-marker")
        time.sleep(input["pause_after_spawn"])
    outcome = ctx.wait_for_result("wait-child", child_id, timeout=input.get("timeout"))
    return {"child": child_id, "outcome": outcome}


@durable_function("tests.grandparent")
def grandparent(ctx, input):
    child_id = ctx.spawn("spawn", "tests.parent", {"child": {"wait_signal": True}})
    return ctx.wait_for_result("wait", child_id)


@durable_function("tests.await_stranger")
def await_stranger(ctx, input):
    return ctx.wait_for_result("wait", input["run_id"])


@durable_function("tests.pivot")
def pivot(ctx, input):
    ctx.step("ship", lambda: effects.record("shipped", ctx.run_id) or "shipped", pivot=True)
    ctx.wait_for_signal("confirm", "confirm")
    return "done"


@durable_function("tests.busy_steps")
def busy_steps(ctx, input):
    for index in range(input.get("steps", 1000)):
        ctx.step("tick", lambda: time.sleep(input.get("pause", 0.05)) or index, occurrence=index)
    return "finished"


@durable_function("tests.busy_until_released")
def busy_until_released(ctx, input):
    """A step every 10 ms until the effects file "release" exists (or input["steps"] were taken); with
    input["orm"], each step's function also makes a query of the handler's own through the ORM."""
    index = 0
    while not effects.exists("release") and index < input.get("steps", float("inf")):
        ctx.step("tick", lambda: _tick(input.get("orm", False)), occurrence=index)
        index += 1
    return index


def _tick(orm: bool) -> None:
    time.sleep(0.01)
    if orm:
        from django.contrib.auth.models import User

        User.objects.exists()


@durable_function("tests.quick_then_done")
def quick_then_done(ctx, input):
    return ctx.step("only", lambda: "value")


@durable_function("tests.spawn_and_return")
def spawn_and_return(ctx, input):
    return ctx.spawn("fire-and-forget", "tests.child", {"wait_signal": True})


@durable_function("tests.pivot_parent")
def pivot_parent(ctx, input):
    ctx.step("commit", lambda: "committed", pivot=True)
    child_id = ctx.spawn("spawn", "tests.child", {"wait_signal": True})
    return ctx.wait_for_result("wait", child_id)


@durable_function("tests.pivot_grandparent")
def pivot_grandparent(ctx, input):
    return ctx.wait_for_result("wait", ctx.spawn("spawn", "tests.pivot_parent", {}))


@durable_function("tests.nul_output", retry=FAST_RETRY)
def nul_output(ctx, input):
    effects.record("nul-output-attempt", str(ctx.attempt))
    return {"text": "before\x00after"}


@durable_function("tests.nul_error")
def nul_error(ctx, input):
    raise ValueError("a message with a NUL: \x00 in it")


@durable_function("tests.nul_step")
def nul_step(ctx, input):
    return ctx.step("poison", lambda: "nul\x00")


@durable_function("tests.atomic_handler")
def atomic_handler(ctx, input):
    from django.db import transaction

    with transaction.atomic():
        ctx.step("inside", lambda: "value")
        ctx.sleep_for("nap", 60)  # a suspension inside the handler's transaction could roll back its own record
    return "woke"


@durable_function("tests.async_fails", retry=RetryPolicy(max_attempts=1))
async def async_fails(ctx, input):
    await ctx.step("first", lambda: 1)
    raise RuntimeError("async failure on purpose")


@durable_function("tests.counted_steps")
def counted_steps(ctx, input):
    """Each step's function records one line per execution, so a test can count re-executions."""

    def work(index):
        effects.record(f"counted-{ctx.run_id}", str(index))
        time.sleep(input.get("pause", 0))
        return index

    return sum(ctx.step("s", lambda i=i: work(i), occurrence=i) for i in range(input["steps"]))


@durable_function("tests.scale_out")
def scale_out(ctx, input):
    """Each step's function records one line per execution in a file of its process's own (test_scale_out.py)."""

    def work(index):
        effects.record(f"scale-{os.getpid()}", f"{ctx.run_id} {index}")
        return index

    return sum(ctx.step("s", lambda i=i: work(i), occurrence=i) for i in range(input["steps"]))


def _events(name, ctx, what):
    """One line per event, with its time and process, to check limits from the runs' own log."""
    effects.record(name, f"{time.time():.6f} {what} {ctx.run_id} {os.getpid()} {ctx.input.get('key')}")


@durable_function("tests.limited", concurrency=Concurrency(1, key=lambda input: input.get("key")))
def limited(ctx, input):
    _events("limited-events", ctx, "start")
    time.sleep(input.get("seconds", 0))
    _events("limited-events", ctx, "end")
    return input.get("key")


@durable_function("tests.mutex", concurrency=Concurrency(1, key=lambda input: input["key"], while_waiting=True))
def mutex(ctx, input):
    ctx.step("before", lambda: effects.record("mutex-before", ctx.run_id))
    ctx.sleep_for("nap", input["seconds"])
    ctx.step("after", lambda: effects.record("mutex-after", ctx.run_id))
    return "done"


@durable_function("tests.rated", rate_limit=RateLimit(5, per=1.0))
def rated(ctx, input):
    _events("rated-events", ctx, "start")
    return input


@durable_function("tests.bad_key", concurrency=Concurrency(1, key=lambda input: input["missing"]))
def bad_key(ctx, input):
    return input


@durable_function("tests.number_key", rate_limit=RateLimit(1, per=1.0, key=lambda input: 42))
def number_key(ctx, input):
    return input


@durable_function("tests.fan_out")
def fan_out(ctx, input):
    """Spawn one tests.child per value of input["children"] (or n of them), then gather them all."""
    children = input.get("children") or [{"value": n} for n in range(input.get("n", 0))]
    ids = ctx.spawn_many("spawn", "tests.child", children, **input.get("options", {}))
    effects.record("fanned-out", ctx.run_id)
    if input.get("fail_once") and ctx.attempt == 1:
        raise RuntimeError("fail after the spawn, so the retry replays it")
    results = ctx.wait_for_all("gather", ids, timeout=input.get("timeout"))
    return {"ids": ids, "results": results}


@durable_function("tests.race_children")
def race_children(ctx, input):
    """Spawn input["children"], return the first of them to finish (then wait for "done" if input["hold"])."""
    ids = ctx.spawn_many("spawn", "tests.child", input["children"])
    first = ctx.wait_for_any("race", ids, timeout=input.get("timeout"))
    effects.record("raced", ctx.run_id)
    if input.get("hold"):
        ctx.wait_for_signal("hold", "done")
    return {"ids": ids, "first": first}


@durable_function("tests.gather_given")
def gather_given(ctx, input):
    """Wait for all (or any) of the run ids in input["ids"] (they need not be this run's children)."""
    if input.get("any"):
        return ctx.wait_for_any("wait", input["ids"])
    return ctx.wait_for_all("wait", input["ids"])


@durable_function("tests.pivot_gatherer")
def pivot_gatherer(ctx, input):
    """Past a pivot, spawn children that wait for a signal and gather them all."""
    ctx.step("commit", lambda: "committed", pivot=True)
    ids = ctx.spawn_many("spawn", "tests.child", [{"value": n, "wait_signal": True} for n in range(input["n"])])
    return ctx.wait_for_all("gather", ids)


@durable_function("tests.spawn_one")
def spawn_one(ctx, input):
    """Spawn one run of input["function"] and wait for it."""
    child = ctx.spawn("spawn", input["function"], input.get("input", {}), **input.get("options", {}))
    return ctx.wait_for_result("wait", child)


@durable_function("tests.two_paced_steps")
def two_paced_steps(ctx, input):
    """A step that takes input["pause"] seconds, then another: its deadline can pass in between."""
    ctx.step("first", lambda: time.sleep(input.get("pause", 0)) or "first")
    effects.record("between-steps", ctx.run_id)
    return ctx.step("second", lambda: "second")


@durable_function("tests.pivot_sleeper")
def pivot_sleeper(ctx, input):
    ctx.step("ship", lambda: "shipped", pivot=True)
    ctx.sleep_for("nap", 3600)
    return "done"


STUCK_RETRY = RetryPolicy(max_attempts=2, initial_delay=0.2, max_delay=0.2, backoff=1.0, jitter=0.0)
ONCE = RetryPolicy(max_attempts=1)


def _stuck(ctx, input):
    effects.record("stuck-attempt", f"{ctx.run_id} {ctx.attempt}")
    time.sleep(input.get("seconds", 3600))
    effects.record("stuck-returned", ctx.run_id)
    return "woke"


@durable_function("tests.stuck", timeout=1, retry=STUCK_RETRY)
def stuck(ctx, input):
    """Sleeps an hour in C code (no context call, nothing can interrupt it) under a 1 s timeout."""
    return _stuck(ctx, input)


@durable_function("tests.stuck_once", timeout=timedelta(seconds=1), retry=ONCE)
def stuck_once(ctx, input):
    return _stuck(ctx, input)


@durable_function("tests.async_stuck", timeout=1, retry=ONCE)
async def async_stuck(ctx, input):
    effects.record("async-stuck-started", ctx.run_id)
    try:
        await asyncio.sleep(3600)
    except asyncio.CancelledError:
        effects.record("async-cancelled", ctx.run_id)
        raise
    return "woke"


@durable_function("tests.limited_stuck", timeout=1, retry=ONCE, concurrency=Concurrency(1))
def limited_stuck(ctx, input):
    _events("limited-stuck-events", ctx, "start")
    time.sleep(input["seconds"])
    _events("limited-stuck-events", ctx, "end")
    return "woke"


@durable_function("tests.late_step", timeout=1, retry=STUCK_RETRY)
def late_step(ctx, input):
    """Attempt 1's step outlasts the timeout, then returns; attempt 2's returns at once."""

    def work():
        effects.record("late-step-ran", str(ctx.attempt))
        time.sleep(input["seconds"] if ctx.attempt == 1 else 0)
        effects.record("late-step-returned", str(ctx.attempt))
        return f"attempt {ctx.attempt}"

    return ctx.step("work", work)


@durable_function("tests.async_fan_out")
async def async_fan_out(ctx, input):
    ids = await ctx.spawn_many("spawn", "tests.child", [{"value": n} for n in range(input["n"])])
    first = await ctx.wait_for_any("first", ids)
    results = await ctx.wait_for_all("all", ids)
    return {"ids": ids, "first": list(first), "values": [result["result"]["value"] for result in results]}


# -- The chaos soak (tests/chaos/test_soak.py) ---------------------------------------------------------
# One interpreter of plans that the soak draws from its seed. Each op of input["ops"] is one durable call
# under the op's own name; the output is what those calls returned, so it must equal the journal. Every
# execution of a step's function appends one JSON line to the effects file "chaos-{run_id}" (step name,
# pid, start time, a nonce that the journalled value carries too, the failures the run had when claimed),
# so the soak counts re-executions and knows which execution the journal kept.

CHAOS_RETRY = RetryPolicy(max_attempts=3, initial_delay=0.3, max_delay=0.6, backoff=2.0, jitter=0.0)


class ChaosFailure(RuntimeError):
    """A "flaky" op of chaos.flow failing on purpose."""


def _chaos_execution(ctx, name: str, pause: float, *, will_fail: bool = False) -> dict:
    nonce = uuid.uuid4().hex
    effects.record(
        f"chaos-{ctx.run_id}",
        json.dumps(
            {
                "step": name,
                "pid": os.getpid(),
                "at": time.time(),
                "nonce": nonce,
                "attempt": ctx.attempt,
                "failures": ctx.run.failures,
                "will_fail": will_fail,
            }
        ),
    )
    time.sleep(pause)
    if will_fail:
        raise ChaosFailure(f"{name} fails on purpose")
    return {"step": name, "pid": os.getpid(), "nonce": nonce}


@durable_function("chaos.flow", retry=CHAOS_RETRY)
def chaos_flow(ctx, input):
    """Ops: step (name, pause), flaky (name, pause, fail: fails while the run has fewer failures than
    that), sleep (name, seconds), signal (name, signal), spawn (name, ops: a chaos.flow child), wait
    (name, child: the spawn op's name)."""
    done = {}
    for op in input["ops"]:
        kind, name = op["op"], op["name"]
        if kind == "step":
            done[name] = ctx.step(name, lambda name=name, op=op: _chaos_execution(ctx, name, op["pause"]))
        elif kind == "flaky":
            done[name] = ctx.step(
                name,
                lambda name=name, op=op: _chaos_execution(
                    ctx, name, op["pause"], will_fail=ctx.run.failures < op["fail"]
                ),
            )
        elif kind == "sleep":
            done[name] = ctx.sleep_for(name, op["seconds"])
        elif kind == "signal":
            done[name] = ctx.wait_for_signal(name, op["signal"])
        elif kind == "spawn":
            done[name] = ctx.spawn(name, "chaos.flow", {"ops": op["ops"]})
        elif kind == "wait":
            done[name] = ctx.wait_for_result(name, done[op["child"]])
        else:
            raise ValueError(f"unknown chaos op {kind!r}")
    return {"ops": done}


@durable_function("tests.progress", retry=FAST_RETRY)
def progress(ctx, input):
    """Reports progress before each step; the first attempt fails after the first, so a retry sees it kept."""
    for index in range(input["steps"]):
        ctx.set_progress({"done": index, "total": input["steps"]})
        ctx.step("work", lambda i=index: i, occurrence=index)
        if ctx.attempt == 1 and input.get("fail_first"):
            raise RuntimeError("first attempt fails on purpose")
    ctx.set_progress({"done": input["steps"], "total": input["steps"]})
    return "done"


@durable_function("tests.oversized_progress")
def oversized_progress(ctx, input):
    from durable_django.exceptions import InvalidInput

    ctx.set_progress("small")
    try:
        ctx.set_progress("x" * input["chars"])
    except InvalidInput as exc:
        return {"refused": str(exc)}
    return {"refused": None}


@durable_function("tests.async_progress")
async def async_progress(ctx, input):
    await ctx.set_progress({"stage": "started"})
    value = await ctx.step("compute", lambda: input["x"] + 1)
    await ctx.set_progress({"stage": "computed", "value": value})
    return value


@durable_function("tests.traced_step")
def traced_step(ctx, input):
    """A step whose function makes a span of its own: it nests under the step's span."""
    from opentelemetry import trace

    def work():
        with trace.get_tracer("tests").start_as_current_span("inside the step"):
            return "traced"

    return ctx.step("work", work)
