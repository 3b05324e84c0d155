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


@durable_function("tests.rated_hourly", rate_limit=RateLimit(2, per=3600))
def rated_hourly(ctx, input):
    """Two starts an hour: a window no test outlives."""
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


@durable_function("tests.async_orm")
async def async_orm(ctx, input):
    """Django's async ORM in a step and outside one: thread-sensitive calls, as a Django project makes them."""
    from django.contrib.auth.models import User

    async def count():
        return await User.objects.acount()

    in_step = await ctx.step("count", count)
    outside = await User.objects.filter(username__startswith=input["prefix"]).acount()
    return {"in_step": in_step, "outside": outside}


@durable_function("tests.traced_step")
def traced_step(ctx, input):
    """A step whose function makes a span of its own: it nests under the step's span."""
    from opentelemetry import trace

    def work():
        with trace.get_tracer("tests").start_as_current_span("inside the step"):
            return "traced"

    return ctx.step("work", work)


@durable_function("tests.stream_words", retry=FAST_RETRY)
def stream_words(ctx, input):
    """Writes each word to the stream "tokens" from the body, then (optionally) some from inside a step."""
    ctx.set_event("status", "started")
    for word in input["words"]:
        time.sleep(input.get("delay", 0))
        ctx.write_stream("tokens", word)
        effects.record("body-write", f"{ctx.attempt}:{word}")
    if input.get("inner"):

        def inner():
            effects.record("inner-step", str(ctx.attempt))
            for word in input["inner"]:
                ctx.write_stream("inner", word)
            if ctx.attempt < input.get("inner_fails_until", 0):
                if input.get("hang"):
                    effects.touch("inner-hangs")
                    time.sleep(600)
                raise ValueError("the step fails after writing, on purpose")
            return len(input["inner"])

        ctx.step("inner", inner)
    if input.get("close", True):
        ctx.close_stream("tokens")
    ctx.set_event("status", "done")
    if ctx.attempt < input.get("fail_until", 0):
        raise ValueError("the body fails after writing, on purpose")
    return len(input["words"])


@durable_function("tests.stream_bad_input")
def stream_bad_input(ctx, input):
    """Reports what each bad write raised; nothing bad is written."""
    refused = {}
    for name, call in {
        "nul-key": lambda: ctx.write_stream("a\x00b", 1),
        "surrogate-key": lambda: ctx.set_event("a\udcffb", 1),
        "long-key": lambda: ctx.write_stream("k" * 513, 1),
        "not-json": lambda: ctx.set_event("ok", object()),
        "nan": lambda: ctx.write_stream("ok", float("nan")),
        "surrogate-value": lambda: ctx.write_stream("ok", "a\udcffb"),
        "too-big": lambda: ctx.write_stream("ok", "x" * int(input["max_bytes"])),
    }.items():
        try:
            call()
        except Exception as exc:  # noqa: BLE001 - every refusal is reported, whatever its type
            refused[name] = f"{type(exc).__name__}: {exc}"
    ctx.write_stream("ok", "\U0001f600 fits")
    ctx.close_stream("ok")
    try:
        ctx.write_stream("ok", "after close")
    except Exception as exc:  # noqa: BLE001 - as above
        refused["after-close"] = f"{type(exc).__name__}: {exc}"
    return refused


@durable_function("tests.async_stream_words")
async def async_stream_words(ctx, input):
    await ctx.set_event("status", "started")
    for word in input["words"]:
        await ctx.write_stream("tokens", word)

    async def inner():
        await ctx.write_stream("inner", ctx.attempt)
        return None

    await ctx.step("inner", inner)
    if ctx.attempt < input.get("fail_until", 0):
        raise ValueError("the body fails after writing, on purpose")
    return len(input["words"])


@durable_function("tests.stream_until_signal")
def stream_until_signal(ctx, input):
    """Writes its words, then waits for "go" (a reader waits meanwhile), then publishes the event "answer"."""
    for word in input["words"]:
        ctx.write_stream("tokens", word)
    answer = ctx.wait_for_signal("wait-go", "go")
    ctx.set_event("answer", answer)
    ctx.write_stream("tokens", "after-signal")
    return answer


@durable_function("tests.long_step")
def long_step(ctx, input):
    """One step of ``seconds``, each execution of it recorded; a client may wait for ``pause`` meanwhile."""

    def work():
        effects.record("long-step", ctx.run_id)
        time.sleep(input["seconds"])
        return "slept"

    return ctx.step("long", work)


@durable_function("tests.limited_nap", concurrency=Concurrency(1, key=lambda input: input["key"]))
def limited_nap(ctx, input):
    """Naps ``nap`` seconds (its slot is free while it sleeps), or keeps its key busy for ``busy`` seconds."""
    if input.get("busy"):
        effects.touch("limited-nap-busy")
        time.sleep(input["busy"])
        return "busy"
    ctx.sleep_for("nap", input["nap"])
    return "napped"


# Two attempts, then parked for an operator (no delay between them, so a test need not wait).
PARK_RETRY = RetryPolicy(max_attempts=2, initial_delay=0.0, max_delay=0.0, jitter=0.0, on_exhausted="park")


@durable_function("tests.parks", retry=PARK_RETRY)
def parks(ctx, input):
    """Journals a step, then fails until the attempt numbered ``succeed_on`` (each attempt is recorded)."""
    ctx.step("before", lambda: "kept")
    effects.record("parks-attempt", str(ctx.attempt))
    if ctx.attempt < input["succeed_on"]:
        raise ValueError(f"attempt {ctx.attempt} fails on purpose")
    return "done"


@durable_function("tests.timed_steps")
def timed_steps(ctx, input):
    """A step of ``seconds`` seconds, a sleep, another step: for the journal's step timings."""
    ctx.step("slow", lambda: time.sleep(input.get("seconds", 0.2)) or "slept")
    ctx.sleep_for("nap", timedelta(seconds=input.get("nap", 3600)))
    return ctx.step("after", lambda: "after")


@durable_function("tests.console_tour", retry=RetryPolicy(max_attempts=3, initial_delay=0.0, jitter=0.0))
def console_tour(ctx, input):
    """What the run page's chart draws: a step, a failed attempt, a sleep, a child waited for, a last step."""
    ctx.step("fetch", lambda: time.sleep(0.05) or "fetched")
    if ctx.attempt == 1:
        raise RuntimeError("the first attempt fails after its step")
    ctx.sleep_for("nap", timedelta(hours=1))
    child_id = ctx.spawn("helper", "tests.noop", {"n": 1})
    ctx.wait_for_result("helper-done", child_id)
    return ctx.step("finish", lambda: "finished")


@durable_function("tests.gated_steps")
def gated_steps(ctx, input):
    """A step, then a second one once the file ``gate`` exists (the test opens it)."""
    ctx.step("one", lambda: "one")

    def two():
        while not effects.exists("gate"):
            time.sleep(0.05)
        return "two"

    return ctx.step("two", two)


@durable_function(
    "tests.parks_with_child",
    retry=RetryPolicy(max_attempts=1, initial_delay=0.0, jitter=0.0, on_exhausted="park"),
)
def parks_with_child(ctx, input):
    """Spawns a child that sleeps an hour, then fails: its only attempt parks it."""
    ctx.spawn("sleepy", "tests.sleeper", {"seconds": 3600})
    raise ValueError("fails after spawning")


def _forkable_step_c(ctx, input, answer):
    if effects.exists("forkable-c-broken"):
        raise RuntimeError("step c is broken")
    effects.touch(f"forkable-c-started-{ctx.run_id}")
    time.sleep(input.get("c_seconds", 0))
    effects.record("forkable-c", ctx.run_id)
    return answer


def _forkable(ctx, input, answer):
    a = ctx.step("a", lambda: effects.record("forkable-a", ctx.run_id) or "a")
    child = ctx.spawn("child", "tests.noop", {"child_of": ctx.run_id})
    b = ctx.step("b", lambda: effects.record("forkable-b", ctx.run_id) or "b")
    c = ctx.step("c", lambda: _forkable_step_c(ctx, input, answer))
    return {"a": a, "b": b, "c": c, "child": ctx.wait_for_result("wait-child", child)}


@durable_function("tests.forkable", version=1, retry=ONCE)
def forkable_v1(ctx, input):
    return _forkable(ctx, input, "c1")


@durable_function("tests.forkable", version=2, retry=ONCE)
def forkable_v2(ctx, input):
    return _forkable(ctx, input, "c2")


@durable_function("tests.changing")
def changing(ctx, input):
    """One workflow as successive deploys change it, chosen by DURABLE_TEST_CODE when each attempt runs."""
    code = os.environ.get("DURABLE_TEST_CODE", "old")
    first = ctx.step("first", lambda: "one")
    if code == "old":
        second = ctx.step("second", lambda: "two")
    elif code == "patched":
        if ctx.patched("rename-second"):
            if input.get("pause_after_patch"):
                effects.touch("patch-recorded")
                time.sleep(input["pause_after_patch"])
            second = ctx.step("second-renamed", lambda: effects.record("second-renamed", ctx.run_id) or "renamed")
        else:
            second = ctx.step("second", lambda: "two")
    elif code == "deprecated":
        ctx.deprecated_patch("rename-second")
        second = ctx.step("second-renamed", lambda: "renamed")
    else:  # "changed": the rename deployed without a patch
        second = ctx.step("second-renamed", lambda: "renamed")
    ctx.sleep_for("nap", input.get("nap", 0))
    return [first, second, ctx.step("third", lambda: "three")]


@durable_function("tests.async_patched")
async def async_patched(ctx, input):
    first = await ctx.step("first", lambda: "one")
    return [first, await ctx.patched("async-patch"), await ctx.patched("async-patch")]


from . import fuzz, poison  # noqa: E402, F401 - their workflows register on import
