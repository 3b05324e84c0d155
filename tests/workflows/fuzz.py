"""The workload fuzzer's functions (tests/fuzz): each execution of a step's function, each attempt's start,
and each limited section is recorded in an effects file (``fuzz-<run id>``, one JSON line each), so the
fuzzer can count executions against the journal and limits against the clock."""

import asyncio
import json
import os
import time
import uuid

from durable_django import Concurrency, RateLimit, RetryPolicy, durable_function

from . import effects
from .poison import LONE_SURROGATE

FUZZ_RETRY = RetryPolicy(max_attempts=3, initial_delay=0.2, max_delay=0.4, backoff=2.0, jitter=0.0)
TIMEOUT_RETRY = RetryPolicy(max_attempts=2, initial_delay=0.2, max_delay=0.2, backoff=1.0, jitter=0.0)
ONCE = RetryPolicy(max_attempts=1)


class FuzzFailure(RuntimeError):
    """A "flaky" op failing on purpose."""


def record(ctx, kind: str, **fields) -> None:
    line = {"kind": kind, "pid": os.getpid(), "at": time.time(), "attempt": ctx.attempt, **fields}
    effects.record(f"fuzz-{ctx.run_id}", json.dumps(line))


def _execute(ctx, name: str, pause: float, *, will_fail: bool = False, value: object = None) -> object:
    nonce = uuid.uuid4().hex
    record(ctx, "exec", step=name, nonce=nonce, will_fail=will_fail)
    time.sleep(pause)
    if will_fail:
        raise FuzzFailure(f"{name} fails on purpose")
    return {"step": name, "nonce": nonce} if value is None else value


@durable_function("fuzz.flow", retry=FUZZ_RETRY)
def flow(ctx, input):
    """Ops: step, flaky (fails while the run has fewer failures than ``fail``), sleep, signal, spawn and
    wait (a child), fan_out (``spawn_many`` then ``wait_for_all``), and the poisons the database refuses:
    poison_step (a step value), poison_error (an error text) and poison_output (the output)."""
    record(ctx, "attempt")
    done: dict = {}
    for op in input["ops"]:
        kind, name = op["op"], op["name"]
        if kind == "step":
            done[name] = ctx.step(name, lambda name=name, op=op: _execute(ctx, name, op["pause"]))
        elif kind == "flaky":
            done[name] = ctx.step(
                name, lambda name=name, op=op: _execute(ctx, name, op["pause"], will_fail=ctx.run.failures < op["fail"])
            )
        elif kind == "sleep":
            ctx.sleep_for(name, op["seconds"])
        elif kind == "signal":
            done[name] = ctx.wait_for_signal(name, op["signal"])
        elif kind == "spawn":
            done[name] = ctx.spawn(name, "fuzz.flow", {"ops": op["ops"]})
        elif kind == "wait":
            done[name] = ctx.wait_for_result(name, done[op["child"]])["state"]
        elif kind == "fan_out":
            ids = ctx.spawn_many(name, "fuzz.flow", [{"ops": ops} for ops in op["children"]])
            done[name] = [child["state"] for child in ctx.wait_for_all(f"{name}-all", ids)]
        elif kind == "poison_step":
            ctx.step(name, lambda name=name: _execute(ctx, name, 0.0, value=f"bad {LONE_SURROGATE}"))
        elif kind == "poison_error":
            raise ValueError(f"cannot read {LONE_SURROGATE}")
        elif kind == "poison_output":
            return {"name": f"bad {LONE_SURROGATE}"}
        else:
            raise ValueError(f"unknown fuzz op {kind!r}")
    return done


@durable_function("fuzz.limited", retry=FUZZ_RETRY, concurrency=Concurrency(1, key=lambda input: input["key"]))
def limited(ctx, input):
    """A sleeper behind a concurrency key of 1: it sleeps (freeing the key), then holds it for a step."""
    record(ctx, "attempt")
    ctx.sleep_for("nap", input["sleep"])
    record(ctx, "enter", key=input["key"])
    ctx.step("work", lambda: _execute(ctx, "work", input["pause"]))
    record(ctx, "exit", key=input["key"])
    return input["key"]


@durable_function("fuzz.rated", retry=FUZZ_RETRY, rate_limit=RateLimit(3, per=1.0))
def rated(ctx, input):
    record(ctx, "attempt")
    record(ctx, "rated")
    return ctx.step("work", lambda: _execute(ctx, "work", input["pause"]))


@durable_function("fuzz.quick", retry=FUZZ_RETRY)
def quick(ctx, input):
    """No limit: due, it must start within a poll interval whenever a slot is idle."""
    record(ctx, "attempt")
    return ctx.step("work", lambda: _execute(ctx, "work", input["pause"]))


@durable_function("fuzz.timeout_sync", retry=TIMEOUT_RETRY, timeout=1.0)
def timeout_sync(ctx, input):
    record(ctx, "attempt")
    return ctx.step("work", lambda: _execute(ctx, "work", input["pause"]))


@durable_function("fuzz.timeout_async", retry=ONCE, timeout=1.0)
async def timeout_async(ctx, input):
    record(ctx, "attempt")
    await asyncio.sleep(input["pause"])
    return "in time"
