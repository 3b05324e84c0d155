"""The workload fuzzer's generator: submissions of the fuzz functions (tests/workflows/fuzz.py) drawn
from a seed, each with the outcomes it may end in.

Everything here is deterministic in the seed: the same seed draws the same submissions, options, cancels
and resumes at the same offsets.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, field

# The error types a run may end failed with, by design of its plan (its class path as stored).
FUZZ_FAILURE = "tests.workflows.fuzz.FuzzFailure"
TIMED_OUT = "durable_django.exceptions.AttemptTimedOut"
DEADLINE = "durable_django.exceptions.DeadlineExceeded"
POISONS = {
    "poison_step": "durable_django.exceptions.StepResultNotSerializable",
    "poison_error": "builtins.ValueError",
    "poison_output": "durable_django.exceptions.InvalidInput",  # the storable domain refuses it before any write
}
# The retry budgets of the fuzz functions (tests/workflows/fuzz.py).
MAX_ATTEMPTS = {
    "fuzz.flow": 3,
    "fuzz.limited": 3,
    "fuzz.rated": 3,
    "fuzz.quick": 3,
    "fuzz.timeout_sync": 2,
    "fuzz.timeout_async": 1,
}
CONCURRENCY_KEYS = ("left", "right")
RATE_LIMIT = (3, 1.0)  # fuzz.rated: 3 starts a second


@dataclass
class Submission:
    index: int
    name: str
    input: dict
    offset: float
    options: dict = field(default_factory=dict)
    # Failed with one of these error types is by design; "succeeded" always is.
    may_fail_with: frozenset[str] = frozenset()
    cancel_after: float | None = None
    resume_after: float | None = None

    @property
    def key(self) -> str:
        return f"fuzz-{self.index}"


def draw_ops(rng: random.Random, *, child: bool = False, poison: bool = True) -> tuple[list[dict], set[str]]:
    """A fuzz.flow plan and the error types it may fail with."""
    ops: list[dict] = []
    counter = itertools.count(1)
    unawaited: list[str] = []
    errors: set[str] = set()
    flaky = signals = spawned = 0

    def name(kind: str) -> str:
        return f"{kind}-{next(counter)}"

    for _ in range(rng.randint(2, 3) if child else rng.randint(3, 6)):
        roll = rng.random()
        if not child and roll < 0.15 and spawned < 2:
            spawned += 1
            unawaited.append(name("spawn"))
            ops.append({"op": "spawn", "name": unawaited[-1], "ops": draw_ops(rng, child=True, poison=False)[0]})
        elif not child and roll < 0.22 and spawned < 2:
            spawned += 1
            children = [draw_ops(rng, child=True, poison=False)[0] for _ in range(rng.randint(2, 4))]
            ops.append({"op": "fan_out", "name": name("fan"), "children": children})
        elif roll < 0.3 and unawaited:
            ops.append({"op": "wait", "name": name("wait"), "child": unawaited.pop(0)})
        elif roll < 0.4:
            ops.append({"op": "sleep", "name": name("sleep"), "seconds": round(rng.uniform(0.2, 1.2), 2)})
        elif roll < 0.5 and signals < 2:
            signals += 1
            ops.append({"op": "signal", "name": name("signal"), "signal": f"go-{signals}"})
        elif roll < 0.58 and not flaky:
            flaky += 1
            fail = rng.choice([1, 1, 2, 3])
            ops.append({"op": "flaky", "name": name("flaky"), "pause": round(rng.uniform(0.05, 0.5), 2), "fail": fail})
            if fail >= 3:
                errors.add(FUZZ_FAILURE)
        else:
            ops.append({"op": "step", "name": name("step"), "pause": round(rng.uniform(0.05, 0.6), 2)})
    ops += [{"op": "wait", "name": name("wait"), "child": child_name} for child_name in unawaited]
    if poison and rng.random() < 0.15:
        kind = rng.choice(sorted(POISONS))
        ops.insert(rng.randint(1, len(ops)), {"op": kind, "name": name(kind)})
        errors.add(POISONS[kind])
    return ops, errors


def draw_workload(rng: random.Random, seconds: float) -> list[Submission]:
    """Submissions over the first 80% of ``seconds``: a burst at the start, then about 2.5 a second."""
    offsets = [0.0] * 10
    while (offset := offsets[-1] + rng.expovariate(2.5)) < 0.8 * seconds:
        offsets.append(offset)
    submissions: list[Submission] = []
    for offset in offsets:
        submissions.extend(_draw_one(rng, len(submissions), offset))
    return submissions


def _draw_one(rng: random.Random, index: int, offset: float) -> list[Submission]:
    roll = rng.random()
    if roll < 0.4:
        ops, errors = draw_ops(rng)
        submission = Submission(index, "fuzz.flow", {"ops": ops}, offset, may_fail_with=frozenset(errors))
        if rng.random() < 0.12:
            submission.cancel_after = round(rng.uniform(0.3, 4.0), 2)
            if rng.random() < 0.5:
                submission.resume_after = round(submission.cancel_after + rng.uniform(0.5, 2.0), 2)
        return [submission]
    if roll < 0.55:
        key = rng.choice(CONCURRENCY_KEYS)
        input_ = {"key": key, "sleep": round(rng.uniform(0.2, 1.5), 2), "pause": round(rng.uniform(0.1, 0.5), 2)}
        return [Submission(index, "fuzz.limited", input_, offset)]
    if roll < 0.65:
        return [Submission(index, "fuzz.rated", {"pause": 0.05}, offset)]
    if roll < 0.8:
        return [Submission(index, "fuzz.quick", {"pause": round(rng.uniform(0.02, 0.2), 2)}, offset)]
    if roll < 0.87:
        late = rng.random() < 0.4
        input_ = {"pause": 2.5 if late else 0.1}
        return [Submission(index, "fuzz.timeout_sync", input_, offset, may_fail_with=frozenset({TIMED_OUT}))]
    if roll < 0.92:
        late = rng.random() < 0.5
        input_ = {"pause": 2.5 if late else 0.1}
        return [Submission(index, "fuzz.timeout_async", input_, offset, may_fail_with=frozenset({TIMED_OUT}))]
    if roll < 0.96:
        ops = [{"op": "step", "name": f"step-{n}", "pause": round(rng.uniform(0.3, 0.9), 2)} for n in range(4)]
        options = {"deadline": round(rng.uniform(1.5, 4.0), 2)}
        return [Submission(index, "fuzz.flow", {"ops": ops}, offset, options, may_fail_with=frozenset({DEADLINE}))]
    # Debounce: three submits 0.2 s apart with one key make one run, with the last input.
    key = f"debounced-{index}"
    return [
        Submission(
            index + n,
            "fuzz.quick",
            {"pause": 0.05, "debounced": key, "call": n},
            offset + 0.2 * n,
            {"debounce": [key, 0.6]},
        )
        for n in range(3)
    ]
