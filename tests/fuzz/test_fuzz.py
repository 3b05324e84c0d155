"""The workload fuzzer: a seeded mix of every feature at once on three real workers under the chaos
soak's faults, checked against invariants that no workload may break.

What runs (tests/fuzz/workload.py, tests/workflows/fuzz.py): ``fuzz.flow`` plans (steps, a flaky step,
sleeps, signals, children and ``spawn_many`` fan-outs, and now and then a poison the database refuses in a
step value, an error text or the output), some with a deadline, some cancelled and then resumed;
sleepers behind a concurrency key of 1 (``fuzz.limited``); a rate-limited function (``fuzz.rated``);
debounced submits; sync and async functions with a 1 s timeout, some past it; quick unlimited runs. A
quarter of the signals are emitted inside a client transaction held open up to a lease and a half.
The faults are the soak's (tests/chaos/harness.py): SIGKILL, SIGSTOP past the lease, SIGTERM, PostgreSQL
restarts.

What must hold (tests/fuzz/checks.py): every run ends and nothing is stranded; no worker dies or logs an
error; a run ends failed only with an error its plan asks for (a poison, a flaky step out of retries, a
timeout, a deadline) and cancelled only if it or its parent was; a step executes at most once per attempt,
never again after the journal kept its value, and at most once more per counted failure or fault that hit
a process that ran it; failures stay within the retry budget and recoveries within the faults that hit
the run's processes; one debounced run per key, with the last input; no concurrency key is held twice at
once and the rate limit holds in every window; no due run that no limit holds waits longer than a poll
interval and a second while a worker keeps a slot free and claims nothing (sampled twice a second, away
from faults: tests/fuzz/idle.py).

Running it: the short run (24 s of workload and faults) is in the suite (in CI on one known seed);
``DURABLE_FUZZ_SECONDS=N`` runs N seconds, ``DURABLE_FUZZ_SEED=S`` replays a seed's workload and fault
schedule. The seed is printed
(``-s``) and starts every failure message; the logs are kept in a ``durable-fuzz-<seed>-*`` directory.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import tempfile
import time

import pytest

from tests.chaos.harness import PrivateServer, SoakConfig
from tests.chaos.test_soak import soak_log_problems
from tests.fuzz.checks import Verdict, read_effects
from tests.fuzz.driver import Fuzz

pytestmark = [pytest.mark.process, pytest.mark.chaos, pytest.mark.long]

SHORT_SECONDS = 24.0
# CI replays one seed whose short run is known to pass, so a red CI means a change broke what it checks;
# a run anywhere else draws a fresh seed, which is how the fuzzer finds what is left.
CI_SEED = 27258928


def fuzz_config() -> SoakConfig:
    seed = os.environ.get("DURABLE_FUZZ_SEED") or (str(CI_SEED) if os.environ.get("CI") == "true" else None)
    seconds = float(os.environ.get("DURABLE_FUZZ_SECONDS") or SHORT_SECONDS)
    return SoakConfig(
        seed=int(seed) if seed else random.SystemRandom().randrange(10**9),
        chaos_seconds=seconds,
        drain_seconds=120.0 if seconds <= 120 else 300.0,
    )


def test_workload_fuzzer(workers, effects_dir, tmp_path):
    pytest.importorskip("pgserver", reason="the fuzzer restarts a PostgreSQL of its own, from pgserver")
    config = fuzz_config()
    print(
        f"workload fuzzer: seed {config.seed}, {config.chaos_seconds:.0f}s "
        f"(replay with DURABLE_FUZZ_SEED={config.seed}); logs in {tmp_path}"
    )
    began = time.monotonic()
    server = PrivateServer()
    fuzz = Fuzz(config, server, workers, tmp_path)
    try:
        fuzz.run()
        verdict = Verdict(fuzz, read_effects(effects_dir))
        verdict.check()
        problems, notes = soak_log_problems(fuzz)
        verdict.problems += problems
    except Exception as exc:
        raise AssertionError(f"workload fuzzer seed {config.seed}: {exc}") from exc
    finally:
        workers.stop_all()
        if fuzz.client is not None:
            fuzz.client.close()
        server.cleanup()
    verdict.stats["errors logged for a connection a restart cut"] = len(notes)
    verdict.stats["wall seconds"] = round(time.monotonic() - began, 1)
    print(verdict.summary())
    origin = fuzz.record.origin
    (tmp_path / "fuzz-report.json").write_text(
        json.dumps(
            {
                "seed": config.seed,
                "stats": verdict.stats,
                "problems": verdict.problems,
                "faults": [fault.describe(origin) for fault in fuzz.record.faults],
            },
            indent=2,
            default=str,
        )
    )
    if verdict.problems:
        kept = tempfile.mkdtemp(prefix=f"durable-fuzz-{config.seed}-")
        shutil.copytree(tmp_path, kept, dirs_exist_ok=True)
        shown = "\n".join(f"- {problem}" for problem in verdict.problems[:40])
        pytest.fail(
            f"workload fuzzer seed {config.seed}: {len(verdict.problems)} problem(s); logs and effects in {kept}\n"
            f"faults: {[fault.describe(origin) for fault in fuzz.record.faults]}\n{shown}",
            pytrace=False,
        )
