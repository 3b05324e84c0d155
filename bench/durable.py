"""Benchmark workloads: functions that do nothing but what is measured."""

import time

from durable_django import Concurrency, RateLimit, durable_function


@durable_function("bench.noop")
def noop(ctx, input):
    return None


@durable_function("bench.steps")
def steps(ctx, input):
    for index in range(input["steps"]):
        ctx.step("noop", lambda: None, occurrence=index)
    return input["steps"]


@durable_function("bench.stamp")
def stamp(ctx, input):
    """Return the wall-clock time the handler started, for wake-up latency."""
    return time.time()


@durable_function("bench.sleeper")
def sleeper(ctx, input):
    ctx.sleep_for("nap", input["seconds"])
    return None


@durable_function("bench.keyed", concurrency=Concurrency(1, key=lambda input: input["key"]))
def keyed(ctx, input):
    """A no-op limited to one run at a time per key."""
    return None


@durable_function("bench.unkeyed")
def unkeyed(ctx, input):
    """The same no-op on the same input, unlimited: the baseline of ``bench.keyed``."""
    return None


@durable_function("bench.rated", rate_limit=RateLimit(1000, per=1.0))
def rated(ctx, input):
    """A no-op whose attempts start at most 1,000 times in any second, across every worker."""
    return None


@durable_function("bench.busy")
def busy(ctx, input):
    """Steps that each take ``pause`` seconds: a slot kept busy, journalling as it goes."""
    for index in range(input["steps"]):
        ctx.step("work", lambda: time.sleep(input["pause"]), occurrence=index)
    return None


@durable_function("bench.spawn_many")
def spawn_many(ctx, input):
    """Spawn input["children"] no-op children with one ctx.spawn_many; returns the seconds it took."""
    started = time.perf_counter()
    ctx.spawn_many("children", "bench.noop", [None] * input["children"])
    return time.perf_counter() - started


@durable_function("bench.spawn_loop")
def spawn_loop(ctx, input):
    """Spawn the same children with one ctx.spawn each; returns the seconds it took."""
    started = time.perf_counter()
    for index in range(input["children"]):
        ctx.spawn("child", "bench.noop", None, occurrence=index)
    return time.perf_counter() - started


@durable_function("bench.gather")
def gather(ctx, input):
    """Spawn input["children"] no-op children and wait for all of them; returns how many results came back."""
    ids = ctx.spawn_many("children", "bench.noop", [None] * input["children"])
    return len(ctx.wait_for_all("gather", ids))


@durable_function("bench.working")
def working(ctx, input):
    """A step, then ``seconds`` of work in ``reports`` parts, each reported with ctx.set_progress, then a step."""
    ctx.step("begin", lambda: None)
    for part in range(input["reports"]):
        time.sleep(input["seconds"] / input["reports"])
        ctx.set_progress({"done": part + 1, "of": input["reports"]})
    ctx.step("end", lambda: None)
    return None
