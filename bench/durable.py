"""Benchmark workloads: functions that do nothing but what is measured."""

import time

from durable_django import durable_function


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
