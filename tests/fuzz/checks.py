"""The workload fuzzer's invariants, checked from the tables and the side-effect log at the end."""

from __future__ import annotations

import collections
import itertools
import json
import os
from dataclasses import dataclass, field

from tests.chaos.harness import LEASE_SECONDS, Fault
from tests.fuzz.driver import Fuzz
from tests.fuzz.workload import FUZZ_FAILURE, MAX_ATTEMPTS, POISONS, RATE_LIMIT

# A handler's start lags its admission by a little; a rate window is counted over starts this much shorter.
RATE_SLACK = 0.25
# Faults that end an attempt without its landing (a SIGTERM drains: its attempts finish).
LOSING_FAULTS = ("SIGKILL", "SIGSTOP")


@dataclass
class Run:
    run_id: str
    name: str
    status: str
    input: dict
    error_type: str | None
    failures: int
    recoveries: int
    parent_run_id: str | None
    created_at: float
    started_at: float | None
    # The latest claim's time: with started_at, the first claim's is the smaller of the two.
    claimed_at: float | None
    finished_at: float | None


def read_effects(directory) -> dict[str, list[dict]]:
    """Each run's effect records (tests/workflows/fuzz.py), oldest first."""
    records: dict[str, list[dict]] = {}
    for entry in os.scandir(directory):
        if entry.name.startswith("fuzz-"):
            with open(entry.path) as handle:
                records[entry.name[len("fuzz-") :]] = [json.loads(line) for line in handle if line.strip()]
    return records


def plan_errors(ops: list[dict]) -> set[str]:
    errors = {POISONS[op["op"]] for op in ops if op["op"] in POISONS}
    if any(op["op"] == "flaky" and op["fail"] >= 3 for op in ops):
        errors.add(FUZZ_FAILURE)
    return errors


def debounce_problems(key: str, runs: list[Run]) -> list[str]:
    """A key's submits make one run with the last input, unless it was claimed when a later submit came.

    The driver paces a key's three submits 0.2 s apart against a 0.6 s delay, but a loaded machine or a
    PostgreSQL restart can hold one back until the run it would have debounced into is claimed: that
    submit rightly makes a new run. A run created while the key's earlier run was still unclaimed is a
    debounce that failed.
    """
    problems = []
    runs = sorted(runs, key=lambda run: run.created_at)
    for earlier, later in itertools.pairwise(runs):
        claims = [moment for moment in (earlier.started_at, earlier.claimed_at) if moment is not None]
        if not claims or later.created_at < min(claims):
            problems.append(
                f"debounce key {key}: run {later.run_id} was made at {later.created_at:.3f} while "
                f"{earlier.run_id} (made at {earlier.created_at:.3f}) was unclaimed, first claimed at "
                f"{min(claims, default=float('nan')):.3f}"
            )
    if runs[-1].input.get("call") != 2:
        problems.append(f"debounce key {key}: run {runs[-1].run_id} kept input {runs[-1].input}, not the last")
    return problems


@dataclass
class Verdict:
    fuzz: Fuzz
    effects: dict[str, list[dict]]
    problems: list[str] = field(default_factory=list)
    stats: collections.Counter = field(default_factory=collections.Counter)

    def __post_init__(self):
        server = self.fuzz.server
        self.runs = {
            row[0]: Run(row[0], row[1], row[2], json.loads(row[3]), *row[4:])
            for row in server.query(
                "SELECT run_id, name, status, input::text, error_type, failures, recoveries, parent_run_id, "
                "extract(epoch FROM created_at)::float8, extract(epoch FROM started_at)::float8, "
                "extract(epoch FROM claimed_at)::float8, extract(epoch FROM finished_at)::float8 FROM durable_run"
            )
        }
        # (run, step id) -> the nonce its journalled value carries
        self.journal: dict[tuple[str, str], str | None] = {}
        for run_id, sid, result in server.query("SELECT run_id, step_id, result::text FROM durable_step"):
            value = json.loads(result)
            self.journal[(run_id, sid.split(":")[1])] = value.get("nonce") if isinstance(value, dict) else None
        self.faults: list[Fault] = self.fuzz.record.faults

    def problem(self, text: str):
        self.problems.append(text)

    def check(self) -> None:
        record = self.fuzz.record
        self.problems += record.problems
        for row in record.live_after_drain:
            self.problem(f"run {row[0]} did not end: {row[1:]}")
        for run_id, problem in record.stranded:
            self.problem(f"run {run_id} stranded: {problem}")
        self.check_outcomes()
        self.check_debounce()
        for run_id, records in self.effects.items():
            self.check_executions(run_id, records)
            self.check_budget(run_id, records)
        self.check_concurrency()
        self.check_rate()
        for waiting in self.fuzz.waiting:
            self.problem(
                f"run {waiting.run_id} ({waiting.name}) was due {waiting.waited:.1f}s while worker pid "
                f"{waiting.worker_pid} kept {waiting.idle_slots} slot(s) idle and claimed nothing, at "
                f"+{waiting.at - record.origin:.1f}s ({waiting.woken_limited} limited sleeper(s) were due then)"
            )
        self.stats["runs"] = len(self.runs)
        self.stats.update(f"status {run.status}" for run in self.runs.values())
        self.stats.update(f"fault {fault.kind}" for fault in self.faults)

    # -- every run ended as its plan allows ----------------------------------------------------------------

    def allowed_errors(self, run: Run) -> set[str]:
        submitted = [s for s in self.fuzz.submissions.values() if self.fuzz.run_ids.get(s.index) == run.run_id]
        errors: set[str] = set()
        for submission in submitted:
            errors |= submission.may_fail_with
        if run.name == "fuzz.flow":
            errors |= plan_errors(run.input["ops"])
        return errors

    def lineage(self, run: Run) -> list[Run]:
        """The run's ancestors, its parent first."""
        ancestors = []
        while run.parent_run_id and run.parent_run_id in self.runs:
            run = self.runs[run.parent_run_id]
            ancestors.append(run)
        return ancestors

    def check_outcomes(self):
        for run in self.runs.values():
            if run.status == "succeeded":
                continue
            if run.status == "cancelled":
                # Cancelled by the fuzzer, or cascaded from an ancestor that was (even if resumed since), or
                # that ended failed or cancelled.
                if (
                    not any(
                        ancestor.run_id in self.fuzz.cancelled or ancestor.status in ("failed", "cancelled")
                        for ancestor in self.lineage(run)
                    )
                    and run.run_id not in self.fuzz.cancelled
                ):
                    self.problem(f"run {run.run_id} ({run.name}) was cancelled, yet nobody cancelled it or its parent")
                continue
            if run.status == "failed" and run.error_type in self.allowed_errors(run):
                continue
            self.problem(f"innocent run {run.run_id} ({run.name}) ended {run.status} with {run.error_type}")

    def check_debounce(self):
        by_key: dict[str, set[str]] = collections.defaultdict(set)
        for submission in self.fuzz.submissions.values():
            key = submission.input.get("debounced")
            if key and submission.index in self.fuzz.run_ids:
                by_key[key].add(self.fuzz.run_ids[submission.index])
        for key, run_ids in by_key.items():
            self.problems += debounce_problems(key, [self.runs[run_id] for run_id in run_ids])
            if len(run_ids) > 1:
                self.stats["debounce keys split by a late submit"] += 1
        self.stats["debounce keys"] = len(by_key)

    # -- executions against the journal and the faults -------------------------------------------------------

    def faults_on(self, pids: set[int], kinds=(*LOSING_FAULTS, "SIGTERM")) -> list[Fault]:
        return [fault for fault in self.faults if fault.pid in pids and fault.kind in kinds]

    def check_executions(self, run_id: str, records: list[dict]):
        run = self.runs.get(run_id)
        if run is None:
            self.problem(f"effects of run {run_id}, which is not in the table")
            return
        by_step: dict[str, list[dict]] = collections.defaultdict(list)
        for item in records:
            if item["kind"] == "exec":
                by_step[item["step"]].append(item)
        for step, executions in by_step.items():
            per_attempt = collections.Counter(item["attempt"] for item in executions)
            twice = [attempt for attempt, count in per_attempt.items() if count > 1]
            if twice:
                self.problem(f"run {run_id}: step {step} executed more than once in attempt(s) {twice}")
            nonce = self.journal.get((run_id, step))
            kept = next((item for item in executions if nonce is not None and item["nonce"] == nonce), None)
            if kept is not None:
                again = [item["attempt"] for item in executions if item["attempt"] > kept["attempt"]]
                if again:
                    self.problem(
                        f"run {run_id}: step {step}, journalled by attempt {kept['attempt']}, executed again in "
                        f"attempt(s) {again}"
                    )
            extra = len(executions) - 1
            pids = {item["pid"] for item in executions}
            allowed = run.failures + len(self.faults_on(pids))
            if run_id in self.fuzz.resumed or run_id in self.fuzz.cancelled:
                allowed += MAX_ATTEMPTS.get(run.name, 3) + 1
            self.stats["re-executions"] += max(extra, 0)
            if extra > allowed:
                self.problem(
                    f"run {run_id}: step {step} executed {len(executions)} times; its run counted {run.failures} "
                    f"failure(s) and {len(self.faults_on(pids))} fault(s) hit its processes"
                )

    def check_budget(self, run_id: str, records: list[dict]):
        run = self.runs.get(run_id)
        if run is None:
            return
        budget = MAX_ATTEMPTS.get(run.name, 3) * (2 if run_id in self.fuzz.resumed else 1)
        if run.failures > budget:
            self.problem(f"run {run_id} ({run.name}): {run.failures} failures, past its budget of {budget}")
        # A fault may hit a claim before its handler records anything: every losing fault while the run lived.
        ended = run.finished_at or float("inf")
        faults = [
            fault
            for fault in self.faults
            if run.created_at - 1 <= fault.at <= ended
            and (fault.kind in LOSING_FAULTS or (fault.kind == "SIGTERM" and fault.grace_ran_out))
        ]
        if run.recoveries > len(faults):
            self.problem(
                f"run {run_id} ({run.name}): {run.recoveries} recoveries, but only {len(faults)} fault(s) hit "
                "workers while it lived"
            )

    # -- limits -------------------------------------------------------------------------------------------

    def check_concurrency(self):
        """No two runs of one key inside their limited section at once, unless a fault explains it (a stopped or
        killed holder's section ends when its lease does, not when it logs an exit)."""
        sections = collections.defaultdict(list)
        for run_id, records in self.effects.items():
            enters = {(item["attempt"]): item for item in records if item["kind"] == "enter"}
            for item in records:
                if item["kind"] == "exit" and item["attempt"] in enters:
                    enter = enters[item["attempt"]]
                    hit = [
                        fault
                        for fault in self.faults
                        if fault.pid == item["pid"] and enter["at"] - LEASE_SECONDS <= fault.at <= item["at"]
                    ]
                    if not hit:
                        sections[item["key"]].append((enter["at"], item["at"], run_id))
        for key, spans in sections.items():
            spans.sort()
            held_until, holder = 0.0, None
            for start, end, run_id in spans:
                if start < held_until:
                    self.problem(
                        f"concurrency key {key}: runs {holder} and {run_id} held it at once ({held_until - start:.2f}s)"
                    )
                if end > held_until:
                    held_until, holder = end, run_id
            self.stats[f"sections of key {key}"] = len(spans)

    def check_rate(self):
        limit, per = RATE_LIMIT
        starts = sorted(item["at"] for records in self.effects.values() for item in records if item["kind"] == "rated")
        for index, began in enumerate(starts):
            within = [at for at in starts[index:] if at < began + per - RATE_SLACK]
            if len(within) > limit:
                self.problem(f"rate limit {limit}/{per}s: {len(within)} starts within {per - RATE_SLACK}s")
                break
        self.stats["rated starts"] = len(starts)

    def summary(self) -> str:
        return ", ".join(f"{key}: {value}" for key, value in sorted(self.stats.items()))
