"""The chaos soak: real workers SIGKILLed, SIGSTOPped past their lease and SIGTERMed at random, and
PostgreSQL restarted, while multi-step workflows with sleeps, signals, children and retries run.

What runs: ``chaos.flow`` runs (tests/workflows/durable.py), each a plan of ops drawn from the seed:
steps (each execution of a step's function is recorded in an effects file, with a nonce that the
journalled value carries), at most one flaky step (it fails while the run has fewer failures than
its plan says; 3 failures use up the retry policy and fail the run), ``ctx.sleep_for``,
``ctx.wait_for_signal`` (the test emits each signal at a random moment, before or after the wait,
and now and then a second time with another value), and up to two children (``ctx.spawn``, with
steps of their own, awaited by ``ctx.wait_for_result``).

Where: three ``manage.py durable_worker`` processes (concurrency 2 to 4, a 3 s lease, a 20 s grace)
on a PostgreSQL server of the test's own (pgserver), so that restarting it disturbs no other test.
The client API runs in a client process on that server (tests/chaos/client.py).

Faults, at random moments drawn from the seed (about one every 2 s in the short soak and every 4 s in a
long one; each signal at least twice):
SIGKILL a worker and start a replacement; SIGSTOP one for a lease plus 1 to 2.5 s, then SIGCONT it;
SIGTERM one (it drains gracefully) and start a replacement; ``pg_ctl restart -m fast`` (once or twice
in the short soak, every ~90 s in a long one). Then no more faults, and a bounded drain.

What must hold at the end:

- every run ended (none pending, running or waiting after the drain), none is lost (every submit is
  a run), and ``Reconciler().stranded()`` finds nothing; no worker repaired a stranded run during the
  soak, died on its own, failed to exit 0 within its grace after SIGTERM, or logged an error or an
  uncaught traceback (an error that a thread logs for a connection a restart cut, before carrying on,
  is only counted in the report);
- children are never spawned twice: a parent's children are exactly the ids its spawn steps
  journalled, one per spawn step, each with the plan it was given;
- every run's journal is a prefix of its plan, and a succeeded run's output equals its journal (the
  output is built from what the ctx calls returned, so from journalled values); a result wait's
  journalled value is its child's final state, output and error;
- retries follow the policy: a run whose flaky step fails ``f`` < 3 times succeeds with exactly ``f``
  failures, ``f`` = 3 fails the run with 3 failures and the ``ChaosFailure`` error, no other run fails
  or counts a failure, and the retry delays (0.3 s, 0.6 s) elapse between the failing executions;
  a cancelled run is only a child of a parent that failed;
- signals are delivered exactly once per (run, signal): one stored value, the first one emitted;
  every emit returns it; the wait journalled it;
- the re-execution bound. A step re-executes only if the execution that ran it never got its journal
  write committed, because its worker was SIGKILLed, or SIGSTOPped past its lease (the run is
  reclaimed; after SIGCONT the stopped worker may also start one more step before its heartbeat
  learns that the lease is gone, and that step is re-run too), or SIGTERMed past its grace (never
  here: the grace outlasts every attempt). A PostgreSQL restart alone re-executes nothing: it comes
  back well within the lease, and a step value waiting to be journalled is written again under the
  same fence token. Checked per execution: every recorded execution of a step other than the one whose
  value the journal kept (and other than the failures the retry policy counted) must be explained by
  a SIGKILL or SIGSTOP of its process while it was in flight (the run's latest execution when the
  signal was sent, begun at most the step's pause plus a lease plus 2 s before), or by the first
  execution its process began for the run within a lease after a SIGCONT, or (in a cancelled run) by
  the cancel; a restart explains none. So a step runs at most 1 + (for the flaky step, the failures
  the policy counted) + (faults of the processes that ran it) times, and in total a SIGKILL explains
  at most ``concurrency`` re-executions of steps that returned (one per slot), plus one per slot of a
  failed attempt whose landing still waited in the worker's batch, and a SIGSTOP at most
  ``2 x concurrency``; the bounds are asserted.

Running it:

- the short soak (24 s of faults, a dozen of them; about 35 s in all on a 2-core machine) runs with the suite;
- ``pytest tests/chaos --soak`` runs a long soak (600 s of faults); ``DURABLE_CHAOS_SECONDS=N`` sets
  the length of the fault window to N seconds (with or without ``--soak``);
- the seed is printed (run with ``-s`` to see it on success) and is in every failure message; replay
  a failure with ``DURABLE_CHAOS_SEED=<seed>``: the same plans, signal moments and fault schedule
  (where a fault lands in a step still depends on timing, so a replay recreates the conditions of a
  failure, not always the failure). Worker logs (with timestamps), the client's log, the
  effects and ``soak-report.json`` (the faults and problems) are in the test's ``tmp_path``, and on a
  failure copied to a ``durable-chaos-<seed>-*`` temporary directory that the message names.
"""

from __future__ import annotations

import collections
import json
import os
import random
import re
import shutil
import tempfile
import time
from dataclasses import dataclass

import pytest

from tests.chaos.harness import (
    LEASE_SECONDS,
    MAX_ATTEMPTS,
    PrivateServer,
    Soak,
    SoakConfig,
    SoakRecord,
    read_effects,
    step_id,
)

pytestmark = [pytest.mark.process, pytest.mark.chaos, pytest.mark.long]

SHORT_SECONDS = 24.0
LONG_SECONDS = 600.0
# Seconds between sending a signal to a worker and the worker acting on it, at most.
SLACK = 0.05
# The retry policy of chaos.flow: the delay before retry n.
RETRY_DELAYS = {1: 0.3, 2: 0.6}


def soak_config(request) -> SoakConfig:
    seed = os.environ.get("DURABLE_CHAOS_SEED")
    seconds = os.environ.get("DURABLE_CHAOS_SECONDS")
    if seconds:
        chaos_seconds = float(seconds)
    else:
        chaos_seconds = LONG_SECONDS if request.config.getoption("--soak") else SHORT_SECONDS
    return SoakConfig(
        seed=int(seed) if seed else random.SystemRandom().randrange(10**9),
        chaos_seconds=chaos_seconds,
        drain_seconds=120.0 if chaos_seconds <= 120 else 300.0,
    )


def test_chaos_soak(workers, effects_dir, tmp_path, request):
    pytest.importorskip("pgserver", reason="the soak restarts a PostgreSQL of its own, from pgserver")
    config = soak_config(request)
    print(
        f"chaos soak: seed {config.seed}, {config.chaos_seconds:.0f}s of faults "
        f"(replay with DURABLE_CHAOS_SEED={config.seed}); logs in {tmp_path}"
    )
    began = time.monotonic()
    server = PrivateServer()
    soak = Soak(config, server, workers, tmp_path)
    try:
        record = soak.run()
        state = State.read(server)
        problems, notes = soak_log_problems(soak)
        record.problems += problems
    except Exception as exc:
        raise AssertionError(f"chaos soak seed {config.seed}: {exc}") from exc
    finally:
        workers.stop_all()
        if soak.client is not None:
            soak.client.close()
        server.cleanup()
    executions, unreadable = read_effects(effects_dir)
    verdict = Verdict(record, state, executions)
    verdict.problems += [f"unreadable effects line {line}" for line in unreadable]
    verdict.check()
    verdict.stats["errors logged for a connection a restart cut"] = len(notes)
    verdict.stats["wall seconds"] = round(time.monotonic() - began, 1)
    summary = verdict.summary()
    print(summary)
    (tmp_path / "soak-report.json").write_text(
        json.dumps(
            {
                "seed": config.seed,
                "stats": verdict.stats,
                "problems": verdict.problems,
                "notes": notes,
                "faults": [fault.describe(record.origin) for fault in record.faults],
            },
            indent=2,
            default=str,
        )
    )
    if verdict.problems:
        # pytest keeps only its last few base directories: keep the evidence where nothing rotates it.
        kept = tempfile.mkdtemp(prefix=f"durable-chaos-{config.seed}-")
        shutil.copytree(tmp_path, kept, dirs_exist_ok=True)
        pytest.fail(verdict.failure_message(soak, kept), pytrace=False)


# -- what the database holds at the end ---------------------------------------------------------------------


@dataclass
class RunRow:
    run_id: str
    status: str
    input: dict
    output: object
    error: str | None
    error_type: str | None
    failures: int
    recoveries: int
    attempts: int
    parent_run_id: str | None
    idempotency_key: str | None
    finished_at: float | None

    @property
    def ops(self) -> list[dict]:
        return self.input["ops"]


@dataclass
class State:
    runs: dict[str, RunRow]
    journal: dict[str, dict[str, object]]
    signals: dict[tuple[str, str], list[tuple[int, object]]]

    @classmethod
    def read(cls, server: PrivateServer) -> State:
        runs = {}
        for row in server.query(
            "SELECT run_id, status, input::text, output::text, error, error_type, failures, recoveries, "
            "attempts, parent_run_id, idempotency_key, extract(epoch FROM finished_at)::float8 "
            "FROM durable_run"
        ):
            (
                run_id,
                status,
                input_,
                output,
                error,
                error_type,
                failures,
                recoveries,
                attempts,
                parent,
                key,
                finished_at,
            ) = row
            runs[run_id] = RunRow(
                run_id,
                status,
                json.loads(input_),
                None if output is None else json.loads(output),
                error,
                error_type,
                failures,
                recoveries,
                attempts,
                parent,
                key,
                finished_at,
            )
        journal: dict[str, dict[str, object]] = collections.defaultdict(dict)
        for run_id, sid, result in server.query("SELECT run_id, step_id, result::text FROM durable_step"):
            journal[run_id][sid] = json.loads(result)
        signals = collections.defaultdict(list)
        for run_id, name, occurrence, value in server.query(
            "SELECT run_id, signal, occurrence, value::text FROM durable_signal"
        ):
            signals[(run_id, name)].append((occurrence, json.loads(value)))
        return cls(runs, journal, signals)


# A log record starts with its timestamp (DURABLE_TEST_LOG_TIMES); a traceback continues it.
LOG_RECORD = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ ")
TRACEBACK = "Traceback (most recent call last):"
# The last line of a traceback whose error is a connection PostgreSQL cut (a restart).
DISCONNECT = re.compile(
    r"^(psycopg\.errors\.AdminShutdown|psycopg\.(Operational|Interface)Error"
    r"|django\.db\.utils\.(Operational|Interface)Error)\b"
)


def soak_log_problems(soak: Soak) -> tuple[list[str], list[str]]:
    """What no worker may log, even under faults: a reconciler repair (a stranded run), an error, a traceback.

    Returns (problems, notes): an error that a worker thread logged (an ERROR record) with a traceback
    whose cause is a connection that a PostgreSQL restart cut is noted rather than failed: the thread
    carries on (the reconciler's "pass failed" after a restart). A traceback that no log record
    introduces is an uncaught exception: a problem.
    """
    problems, notes = [], []
    restarted = any(fault.kind == "restart" for fault in soak.record.faults)
    for worker in soak.record.workers:
        records: list[list[str]] = []
        for line in soak.log(worker).splitlines():
            if LOG_RECORD.match(line) or not records:
                records.append([line])
            else:
                records[-1].append(line)
        for record in records:
            text = f"{worker.name} (pid {worker.pid}) logged: " + " | ".join(record[:40])
            if "reconciler: run" in record[0]:
                problems.append(f"{worker.name} (pid {worker.pid}) repaired a stranded run: {record[0]}")
            elif " ERROR " in record[0] or " CRITICAL " in record[0] or TRACEBACK in record:
                cut = restarted and " ERROR " in record[0] and any(map(DISCONNECT.match, record[1:]))
                (notes if cut else problems).append(text)
    return problems, notes


# -- the checks -------------------------------------------------------------------------------------------


class Verdict:
    def __init__(self, record: SoakRecord, state: State, executions: dict[str, list[dict]]):
        self.record = record
        self.state = state
        self.executions = executions
        self.problems: list[str] = list(record.problems)
        self.stats: dict[str, object] = {}
        # Fault (by index) -> the re-executions it explains.
        self.explained: collections.Counter = collections.Counter()
        # Of those, the executions that failed on purpose (their failure may have waited for its landing).
        self.explained_failing: collections.Counter = collections.Counter()
        self.reexecutions: collections.Counter = collections.Counter()
        self.most_executions = 0

    def problem(self, run_id: str | None, text: str):
        self.problems.append(f"run {run_id}: {text}" if run_id else text)

    def check(self):
        self.check_every_run_ended()
        for run in self.state.runs.values():
            self.check_journal_and_output(run)
            self.check_children(run)
            self.check_retries(run)
            self.check_executions(run)
        self.check_signals()
        self.check_fault_bounds()
        self.count()

    # -- every run ended, none lost, none stranded ----------------------------------------------------------

    def check_every_run_ended(self):
        record, runs = self.record, self.state.runs
        for run_id, status, waiting_for, leased_until, attempts, worker_id in record.live_after_drain:
            self.problem(
                run_id,
                f"still {status} after the {record.config.drain_seconds:.0f}s drain "
                f"(waiting for {waiting_for}, lease {leased_until}, attempts {attempts}, "
                f"worker {worker_id})",
            )
        for run_id, problem in record.stranded:
            self.problem(run_id, f"stranded: {problem}")
        for key, run_id in record.enqueued.items():
            if run_id not in runs:
                self.problem(run_id, f"lost: submitted with key {key}, not in the database")
        top = {run.run_id for run in runs.values() if run.parent_run_id is None}
        for run_id in top - set(record.enqueued.values()):
            self.problem(run_id, "a top-level run nobody submitted")
        for run in runs.values():
            if run.parent_run_id is not None and run.parent_run_id not in runs:
                self.problem(run.run_id, f"its parent {run.parent_run_id} does not exist")

    # -- the journal, the output, children -----------------------------------------------------------------

    def check_journal_and_output(self, run: RunRow):
        rows = self.state.journal.get(run.run_id, {})
        planned = [step_id(op["name"]) for op in run.ops]
        unplanned = sorted(set(rows) - set(planned))
        if unplanned:
            self.problem(run.run_id, f"journal rows its plan has no op for: {unplanned}")
        done = [index for index, sid in enumerate(planned) if sid in rows]
        if done != list(range(len(done))):
            self.problem(run.run_id, f"journal is not a prefix of its plan: ops {done} of {len(planned)}")
        if run.status == "succeeded":
            if len(done) != len(planned):
                self.problem(run.run_id, f"succeeded with {len(done)} of {len(planned)} ops journalled")
                return
            expected = {
                "ops": {op["name"]: None if op["op"] == "sleep" else rows[step_id(op["name"])] for op in run.ops}
            }
            if run.output != expected:
                self.problem(run.run_id, f"output {run.output} does not match its journal {expected}")
        if run.status == "cancelled":
            parent = self.state.runs.get(run.parent_run_id)
            if parent is None or parent.status != "failed":
                self.problem(
                    run.run_id,
                    f"cancelled, though nothing cancels a run but the failure of its parent "
                    f"({parent.status if parent else 'no parent'})",
                )

    def check_children(self, run: RunRow):
        rows = self.state.journal.get(run.run_id, {})
        runs = self.state.runs
        spawned = {}
        for op in run.ops:
            sid = step_id(op["name"])
            if op["op"] == "spawn" and sid in rows:
                child = runs.get(rows[sid])
                spawned[rows[sid]] = op
                if child is None:
                    self.problem(run.run_id, f"spawn {op['name']} journalled child {rows[sid]}, which does not exist")
                elif child.ops != op["ops"]:
                    self.problem(run.run_id, f"child {child.run_id} of {op['name']} has another plan")
            elif op["op"] == "wait" and sid in rows:
                child_sid = step_id(op["child"])
                child = runs.get(rows.get(child_sid))
                # A child that succeeded reports no error (its run keeps the failures it recovered from).
                error = None if child and child.status == "succeeded" else child and child.error
                outcome = child and {"state": child.status, "result": child.output, "error": error}
                if rows[sid] != outcome:
                    self.problem(run.run_id, f"wait {op['name']} journalled {rows[sid]}, its child ended {outcome}")
        children = [child.run_id for child in runs.values() if child.parent_run_id == run.run_id]
        if sorted(children) != sorted(spawned):
            self.problem(
                run.run_id,
                f"children in the database {sorted(children)} are not the ones its spawn "
                f"steps journalled {sorted(spawned)}: a child spawned twice or lost",
            )

    # -- retries ---------------------------------------------------------------------------------------

    def check_retries(self, run: RunRow):
        flaky = next((op for op in run.ops if op["op"] == "flaky"), None)
        ran = [e for e in self.executions.get(run.run_id, []) if flaky and e["step"] == flaky["name"]]
        if flaky is None or not ran:
            if run.failures or run.status == "failed":
                self.problem(
                    run.run_id,
                    f"{run.status} with {run.failures} failure(s), though nothing in it "
                    f"fails on purpose: {run.error_type}: {(run.error or '')[-500:]}",
                )
            return
        expected_failures = min(flaky["fail"], MAX_ATTEMPTS)
        if run.status == "cancelled":  # its parent failed: cancelled wherever it was in its retries
            if run.failures > expected_failures:
                self.problem(
                    run.run_id,
                    f"cancelled with {run.failures} failure(s), more than its flaky step's {expected_failures}",
                )
            return
        expected_status = "failed" if flaky["fail"] >= MAX_ATTEMPTS else "succeeded"
        if (run.status, run.failures) != (expected_status, expected_failures):
            self.problem(
                run.run_id,
                f"{run.status} with {run.failures} failure(s); its flaky step fails "
                f"{flaky['fail']} time(s), so the policy says {expected_status} with "
                f"{expected_failures}: {run.error_type}: {(run.error or '')[-500:]}",
            )
        if run.status == "failed" and not (run.error_type or "").endswith(".ChaosFailure"):
            self.problem(run.run_id, f"failed with {run.error_type}, not the flaky step's ChaosFailure")
        failing = sorted((e for e in ran if e["will_fail"]), key=lambda e: e["at"])
        kept = self.state.journal.get(run.run_id, {}).get(step_id(flaky["name"]))
        last = next((e for e in ran if kept and e["nonce"] == kept.get("nonce")), failing[-1] if failing else None)
        retries = min(flaky["fail"], MAX_ATTEMPTS - 1)
        needed = sum(RETRY_DELAYS[n] for n in range(1, retries + 1))
        if failing and last["at"] - failing[0]["at"] < needed - 0.05:
            self.problem(
                run.run_id,
                f"retried too early: {last['at'] - failing[0]['at']:.2f}s from the first "
                f"failing execution to the last execution, the policy's delays add up "
                f"to {needed:.2f}s",
            )

    # -- re-executions ------------------------------------------------------------------------------------

    def explain(self, run: RunRow, execution: dict, ran: list[dict], pause: float):
        """The fault (its index) or "cancelled" that explains why ``execution`` got no value journalled, or None.

        ``ran`` is every execution of the run, in time order. A fault of a process explains the run's
        execution that was in flight when it struck (the run's latest execution before it, by that
        process, started at most a step's pause and a lease before it), and after a SIGCONT the first
        execution that process started for the run within a lease (its heartbeat had not yet learnt
        that the lease was gone). A PostgreSQL restart explains any run's execution in flight when it
        struck. A cancel explains the execution in flight when the run was cancelled.
        A fault's instants are taken just after its signals were sent; ``SLACK`` covers the delivery.
        """
        at, pid = execution["at"], execution["pid"]
        window = pause + LEASE_SECONDS + 2.0

        def in_flight(moment: float) -> bool:
            before = [e for e in ran if e["at"] <= moment]
            return bool(before) and before[-1] is execution and moment - at <= window

        for index, fault in enumerate(self.record.faults):
            # A restart that cuts an execution's write for longer than the write keeps trying ends that
            # attempt lost (engine/attempt.py): the run is recovered and the step runs again.
            if fault.kind == "restart" and in_flight(fault.at + SLACK):
                return index
            if fault.pid != pid:
                continue
            interrupts = fault.kind in ("SIGKILL", "SIGSTOP") or (fault.kind == "SIGTERM" and fault.grace_ran_out)
            if interrupts and in_flight(fault.at + SLACK):
                return index
            resumed = fault.until - SLACK
            first_after_resume = fault.kind == "SIGSTOP" and resumed <= at <= fault.until + LEASE_SECONDS
            if first_after_resume and next(e for e in ran if e["pid"] == pid and e["at"] >= resumed) is execution:
                return index
        if run.status == "cancelled" and run.finished_at is not None and in_flight(run.finished_at + 0.5):
            return "cancelled"
        return None

    def check_executions(self, run: RunRow):
        ran = sorted(self.executions.get(run.run_id, []), key=lambda e: e["at"])
        rows = self.state.journal.get(run.run_id, {})
        steps = {op["name"]: op for op in run.ops if op["op"] in ("step", "flaky")}
        for name in sorted({e["step"] for e in ran} - set(steps)):
            self.problem(run.run_id, f"executions of {name}, which its plan has no step for")
        for name, op in steps.items():
            of_step = [e for e in ran if e["step"] == name]
            self.most_executions = max(self.most_executions, len(of_step))
            row = rows.get(step_id(name))
            needs = list(of_step)
            if row is not None:
                kept = [e for e in of_step if e["nonce"] == row.get("nonce")]
                if len(kept) != 1:
                    self.problem(
                        run.run_id, f"step {name} journalled {row}, which {len(kept)} recorded executions returned"
                    )
                needs = [e for e in of_step if e not in kept]
            # Each failure the policy counted is one failing execution that saw the failures before it;
            # of those that saw the same count, all but the one that landed need a fault to explain them.
            for seen in range(run.failures if op["op"] == "flaky" else 0):
                failing = [e for e in needs if e["will_fail"] and e["failures"] == seen]
                if not failing:
                    self.problem(
                        run.run_id,
                        f"failure {seen + 1} is counted, but no execution of {name} that saw {seen} failure(s) failed",
                    )
                    continue
                unexplained = [e for e in failing if self.explain(run, e, ran, op["pause"]) is None]
                needs.remove(unexplained[0] if unexplained else failing[-1])
            for execution in needs:
                why = self.explain(run, execution, ran, op["pause"])
                if why is None:
                    self.problem(
                        run.run_id,
                        f"step {name} re-executed with no fault to explain it: "
                        f"{self.describe(execution)}; its executions: "
                        f"{[self.describe(e) for e in of_step]}; faults near it: "
                        f"{self.faults_near(execution['at'])}",
                    )
                    continue
                self.explained[why] += 1
                if execution["will_fail"]:
                    self.explained_failing[why] += 1
                self.reexecutions[why if why == "cancelled" else self.record.faults[why].kind] += 1

    def describe(self, execution: dict) -> str:
        worker = next((w.name for w in self.record.workers if w.pid == execution["pid"]), "?")
        return (
            f"+{execution['at'] - self.record.origin:.2f}s by {worker} (pid {execution['pid']}) attempt "
            f"{execution['attempt']} after {execution['failures']} failure(s)"
            f"{', failing' if execution['will_fail'] else ''}"
        )

    def faults_near(self, moment: float) -> list[str]:
        return [
            fault.describe(self.record.origin)
            for fault in self.record.faults
            if fault.at - 2 * LEASE_SECONDS <= moment <= fault.until + 2 * LEASE_SECONDS
        ]

    def check_fault_bounds(self):
        """A SIGKILL cuts at most one execution per slot, and per slot at most one failed attempt whose
        landing still waited in the worker's landing batch (the slot had moved on to another run): so at
        most ``concurrency`` re-executions of steps that returned, and twice that in all."""
        for index, fault in enumerate(self.record.faults):
            bound = {"SIGKILL": 2 * fault.concurrency, "SIGSTOP": 2 * fault.concurrency}.get(fault.kind)
            returned = self.explained[index] - self.explained_failing[index]
            if bound is not None and self.explained[index] > bound:
                self.problem(
                    None,
                    f"{fault.describe(self.record.origin)} explains {self.explained[index]} "
                    f"re-executions, more than its bound {bound}",
                )
            if fault.kind == "SIGKILL" and returned > fault.concurrency:
                self.problem(
                    None,
                    f"{fault.describe(self.record.origin)} explains {returned} re-executions of steps that "
                    f"returned, more than its {fault.concurrency} slots",
                )

    # -- signals ---------------------------------------------------------------------------------------

    def check_signals(self):
        emitted = collections.defaultdict(list)
        for emit in self.record.emits:
            emitted[(emit.run_id, emit.signal)].append(emit)
        for (run_id, name), emits in emitted.items():
            first = emits[0].value
            for emit in emits:
                if emit.stored != first:
                    self.problem(
                        run_id, f"emit of {name} {emit.value} returned {emit.stored}, not the first value {first}"
                    )
            stored = self.state.signals.get((run_id, name), [])
            if stored != [(0, first)]:
                self.problem(run_id, f"signal {name} is stored as {stored}, not once as the first value {first}")
        for key in set(self.state.signals) - set(emitted):
            self.problem(key[0], f"a signal {key[1]} nobody emitted is stored")
        for run in self.state.runs.values():
            rows = self.state.journal.get(run.run_id, {})
            for op in run.ops:
                if op["op"] != "signal" or step_id(op["name"]) not in rows:
                    continue
                stored = self.state.signals.get((run.run_id, op["signal"]), [(0, "nothing stored")])
                if rows[step_id(op["name"])] != stored[0][1]:
                    self.problem(
                        run.run_id,
                        f"wait {op['name']} journalled {rows[step_id(op['name'])]}, the "
                        f"signal {op['signal']} stored is {stored[0][1]}",
                    )

    # -- the report -------------------------------------------------------------------------------------

    def count(self):
        record, runs = self.record, self.state.runs
        faults = collections.Counter(fault.kind for fault in record.faults)
        executions = sum(len(ran) for ran in self.executions.values())
        step_rows = sum(
            1
            for run in runs.values()
            for op in run.ops
            if op["op"] in ("step", "flaky") and step_id(op["name"]) in self.state.journal.get(run.run_id, {})
        )
        self.stats.update(
            {
                "seed": record.config.seed,
                "chaos seconds": record.config.chaos_seconds,
                "drain seconds": round(record.drained - record.chaos_ended, 1),
                "faults": dict(faults),
                "faults in all": sum(faults.values()),
                "restart outages (s)": [round(f.until - f.at, 2) for f in record.faults if f.kind == "restart"],
                "SIGSTOP pauses (s)": [round(f.until - f.at, 2) for f in record.faults if f.kind == "SIGSTOP"],
                "workers started": len(record.workers),
                "runs": len(runs),
                "top-level runs": sum(run.parent_run_id is None for run in runs.values()),
                "statuses": dict(collections.Counter(run.status for run in runs.values())),
                "journalled steps": step_rows,
                "step executions": executions,
                "re-executions": dict(self.reexecutions),
                "most executions of one step": self.most_executions,
                "recoveries": sum(run.recoveries for run in runs.values()),
                "failures": sum(run.failures for run in runs.values()),
                "signals emitted": len(record.emits),
            }
        )

    def summary(self) -> str:
        lines = [f"chaos soak seed {self.record.config.seed}:"]
        lines += [f"  {key}: {value}" for key, value in self.stats.items()]
        lines += ["  faults:"] + [f"    {fault.describe(self.record.origin)}" for fault in self.record.faults]
        return "\n".join(lines)

    def failure_message(self, soak: Soak, kept: str) -> str:
        seed = self.record.config.seed
        lines = [
            f"chaos soak seed {seed} (replay with DURABLE_CHAOS_SEED={seed}): "
            f"{len(self.problems)} problem(s); worker logs, effects and soak-report.json kept in {kept}"
        ]
        lines += [f"- {problem}" for problem in self.problems[:40]]
        run_ids = []
        for problem in self.problems:
            match = re.match(r"run (\S+):", problem)
            if match and match.group(1) not in run_ids:
                run_ids.append(match.group(1))
        logs = {worker.name: soak.log(worker).splitlines() for worker in self.record.workers}
        for run_id in run_ids[:5]:
            lines.append(f"log lines of run {run_id}:")
            lines += [f"  {name}: {line}" for name, log in logs.items() for line in log if run_id in line][:25]
        lines.append(self.summary())
        return "\n".join(lines)
