"""Workflows whose values PostgreSQL refuses (a lone surrogate, as ``surrogateescape`` makes them), run
beside innocent ones: what one run writes must never fail, delay or re-run another's write."""

import time

from durable_django import RetryPolicy, durable_function

from . import effects

# A lone surrogate: what Python makes of an undecodable byte with ``surrogateescape``.
LONE_SURROGATE = b"\xff".decode("utf-8", "surrogateescape")

TWICE = RetryPolicy(max_attempts=2, initial_delay=0.2, max_delay=0.2, backoff=1.0, jitter=0.0)


@durable_function("tests.step_at_once", retry=TWICE)
def step_at_once(ctx, input):
    """One step whose fn waits for the file "go": started together, the runs journal their steps at once."""

    def arrive_and_wait():
        effects.record(f"step-{input['index']}")
        deadline = time.monotonic() + 60
        while not effects.exists("go") and time.monotonic() < deadline:
            time.sleep(0.005)
        return f"bad {LONE_SURROGATE}" if input.get("poison") else input["index"]

    return ctx.step("at-once", arrive_and_wait)


@durable_function("tests.surrogate_error", retry=RetryPolicy(max_attempts=1))
def surrogate_error(ctx, input):
    effects.record("surrogate-error-attempt", str(ctx.attempt))
    raise ValueError(f"cannot read {LONE_SURROGATE} from the file")


@durable_function("tests.surrogate_output", retry=TWICE)
def surrogate_output(ctx, input):
    effects.record("surrogate-output-attempt", str(ctx.attempt))
    return {"name": f"file-{LONE_SURROGATE}"}


@durable_function("tests.surrogate_progress")
def surrogate_progress(ctx, input):
    from durable_django.exceptions import InvalidInput

    try:
        ctx.set_progress({"file": f"file-{LONE_SURROGATE}"})
    except InvalidInput as exc:
        return {"refused": type(exc).__name__}
    return {"refused": None}
