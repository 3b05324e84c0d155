"""Fan-out, fan-in and bulk enqueue against their one-at-a-time and raw baselines.

- ``ctx.spawn_many`` of N children vs N ``ctx.spawn`` calls, each made by one attempt of a parent
  run executed in this process; only the spawning is timed, inside the handler. Target >= 20x.
- Gathering N children: a parent waits for all of them while worker processes drain them. The
  parent must be claimed once after its spawn (its attempts: 2); the children's drain rate is
  compared with the same number of runs that have no parent (what the fan-in costs each landing),
  with what explains a difference: how often the workers' statements wait on a row lock, and the
  CPU per run of the workers and of the server (the steadier figure on a shared machine).
- ``enqueue_many`` of N vs a loop of ``api.enqueue`` in one transaction (target >= 10x), and vs raw
  psycopg writing the same rows to a table with the same columns and indexes: one multi-row
  ``INSERT ... SELECT FROM unnest(...)`` with the arrays sent in binary (the fastest multi-row INSERT
  measured here; target >= 0.8, enqueue_many being a multi-row INSERT itself), and a ``COPY``
  (reported beside it). Each side starts from an empty table and makes its own run ids and input
  JSON; the rounds alternate the sides and each side's best round counts.
"""

from __future__ import annotations

import json
import os
import statistics
import time
import uuid

from . import common
from .common import raw_connect, record, reset_tables

ROUNDS = 3

RAW_INSERT_MANY = """
INSERT INTO bench_raw_run (run_id, name, version, status, input, retry_policy, queue, priority)
SELECT r.run_id, 'bench.noop', 1, 'pending', r.input::jsonb, %(policy)s::jsonb, 'default', 0
FROM unnest(%(run_ids)b::text[], %(inputs)b::text[]) AS r(run_id, input)
"""
RAW_COPY = "COPY bench_raw_run (run_id, name, version, status, input, retry_policy, queue, priority) FROM STDIN"


def _inputs(n: int) -> list[dict]:
    return [{"to": f"user{index}@example.com", "n": index} for index in range(n)]


def _empty(*tables: str) -> None:
    with raw_connect() as conn:
        conn.execute(f"TRUNCATE {', '.join(tables)}")


def _run_in_process(name: str, input: dict) -> object:
    """Enqueue one run of ``name`` and execute it in this process; its output."""
    from durable_django import api
    from durable_django.testing import run_until_idle

    run = api.enqueue(name, input)
    run_until_idle(functions=[name])
    done = api.get_run(run.run_id)
    assert done.status == "succeeded", done.error
    return done.output


def spawn_many_vs_spawn_loop(n: int) -> None:
    reset_tables()
    _run_in_process("bench.spawn_many", {"children": 100})  # warm-up: connections, prepared statements
    loops, batches = [], []
    for _ in range(ROUNDS):
        _empty("durable_run", "durable_step")
        batches.append(_run_in_process("bench.spawn_many", {"children": n}))
        _empty("durable_run", "durable_step")
        loops.append(_run_in_process("bench.spawn_loop", {"children": n}))
        if loops[-1] > 60:
            break  # one slow round of the loop is enough to compare
    batch, loop = min(batches), min(loops)
    record(
        f"ctx.spawn_many of {n:,} children vs {n:,} ctx.spawn calls",
        f"{batch:.2f} s vs {loop:.2f} s",
        f"{loop / batch:.0f}x",
        ">= 20x",
    )


def gather(n: int, processes: int) -> None:
    """A parent gathering n children drained by worker processes, vs n runs without a parent."""
    from durable_django import api, enqueue_many

    def drained(where: str) -> int:
        with raw_connect() as conn:
            query = f"SELECT count(*) FROM durable_run WHERE status = 'succeeded' AND {where}"
            return conn.execute(query).fetchone()[0]

    reset_tables()
    enqueue_many("bench.noop", [None] * n)
    with raw_connect() as conn:
        conn.execute("VACUUM ANALYZE durable_run")
    workers = [common.spawn(common.worker_command(8)) for _ in range(processes)]
    alone_waits, alone_cpu = LockWaits(), CpuMeter(workers, n)
    try:
        alone = common.rate_while_draining(
            lambda: alone_cpu.note(drained("true")), n, workers, on_sample=alone_waits.sample
        )
    finally:
        common.stop(workers)
        alone_waits.close()
    reset_tables()
    parent = _spawned_parent(n)
    with raw_connect() as conn:
        conn.execute("VACUUM ANALYZE durable_run")
    workers = [common.spawn(common.worker_command(8)) for _ in range(processes)]
    gathered_waits, gathered_cpu = LockWaits(), CpuMeter(workers, n)
    try:
        gathered = common.rate_while_draining(
            lambda: gathered_cpu.note(drained("parent_run_id IS NOT NULL")), n, workers, on_sample=gathered_waits.sample
        )
        deadline = time.monotonic() + 300
        while api.get_run(parent).status != "succeeded" and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        common.stop(workers)
        gathered_waits.close()
    done = api.get_run(parent)
    assert done.status == "succeeded" and done.output == n, (done.status, done.output, done.error)
    record(
        f"{n:,} children landing under a parent gathering them / {n:,} runs without a parent ({processes}x8 workers)",
        f"{gathered:,.0f} vs {alone:,.0f} runs/s; the parent claimed {done.attempts - 1} time(s) after its spawn; "
        f"workers' statements waiting on a row lock: {gathered_waits.share:.0%} vs {alone_waits.share:.0%}; "
        f"CPU per run, PostgreSQL: {gathered_cpu.server_ms:.2f} vs {alone_cpu.server_ms:.2f} ms, "
        f"workers: {gathered_cpu.workers_ms:.2f} vs {alone_cpu.workers_ms:.2f} ms",
        f"{gathered / alone:.2f}",
        "claimed once",
    )


class LockWaits:
    """Samples the workers' statements while they drain: the share of them waiting on a row lock (a landing
    queued behind another on the row it must lock, as every child's landing locks its parent's row)."""

    def __init__(self) -> None:
        self._conn = raw_connect()
        self.active = self.waiting = 0

    def sample(self) -> None:
        active, waiting = self._conn.execute(
            "SELECT count(*), count(*) FILTER (WHERE wait_event_type = 'Lock' AND wait_event IN ('tuple', "
            "'transactionid')) FROM pg_stat_activity WHERE state = 'active' AND backend_type = 'client backend' "
            "AND datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchone()
        self.active, self.waiting = self.active + active, self.waiting + waiting

    @property
    def share(self) -> float:
        return self.waiting / self.active if self.active else 0.0

    def close(self) -> None:
        self._conn.close()


class CpuMeter:
    """CPU time per run of the worker processes and of the (local) PostgreSQL server, from the first run
    drained to the last, read from /proc: the server's is its postmaster's own and reaped children's, plus
    every live backend's (NaN when the server is not on this machine)."""

    def __init__(self, workers: list, total: int) -> None:
        self._workers, self._total = [worker.pid for worker in workers], total
        with raw_connect() as conn:  # read while this backend lives: its parent is the postmaster
            stat = _stat(conn.execute("SELECT pg_backend_pid()").fetchone()[0])
        self._postmaster = int(stat[1]) if stat is not None else None
        self._start: tuple[int, float, float] | None = None
        self.server_ms = self.workers_ms = float("nan")

    def note(self, done: int) -> int:
        """Called with each count of drained runs; returns it."""
        if self._start is None and done > 0:
            self._start = (done, *self._read())
        elif self._start is not None and done >= self._total:
            first, server, workers = self._start
            server_now, workers_now = self._read()
            runs = max(done - first, 1)
            self.server_ms, self.workers_ms = (server_now - server) / runs, (workers_now - workers) / runs
        return done

    def _read(self) -> tuple[float, float]:
        tick_ms = 1000 / os.sysconf("SC_CLK_TCK")
        workers = sum(_cpu(pid) for pid in self._workers) * tick_ms
        if self._postmaster is None:
            return float("nan"), workers
        server = _cpu(self._postmaster, reaped=True)
        for entry in os.listdir("/proc"):
            if entry.isdigit() and (stat := _stat(int(entry))) is not None and stat[1] == str(self._postmaster):
                server += _cpu(int(entry))
        return server * tick_ms, workers


def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (state, ppid, ...), or None."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return None


def _cpu(pid: int, *, reaped: bool = False) -> int:
    """utime + stime of a process in clock ticks (with its reaped children's when ``reaped``); 0 once gone."""
    stat = _stat(pid)
    if stat is None:
        return 0
    return sum(int(value) for value in stat[11 : 15 if reaped else 13])


def _spawned_parent(n: int) -> str:
    """A bench.gather parent that has spawned its n children and waits for them (run in this process)."""
    from durable_django import api
    from durable_django.testing import run_until_idle

    run = api.enqueue("bench.gather", {"children": n})
    run_until_idle(functions=["bench.gather"])
    waiting = api.get_run(run.run_id)
    assert (waiting.status, waiting.waiting_for) == ("waiting", "children:all"), waiting
    return run.run_id


def enqueue_many_vs_loop_and_raw(n: int) -> None:
    from django.db import transaction

    from durable_django import api, enqueue_many

    inputs = _inputs(n)
    reset_tables()
    policy = json.dumps({"max_attempts": 3, "initial_delay": 1.0, "max_delay": 300.0, "backoff": 2.0, "jitter": 1.0})

    def batch() -> float:
        _empty("durable_run")
        started = time.perf_counter()
        with transaction.atomic():
            runs = enqueue_many("bench.noop", inputs)
        elapsed = time.perf_counter() - started
        assert len(runs) == n
        return elapsed

    def loop() -> float:
        _empty("durable_run")
        started = time.perf_counter()
        with transaction.atomic():
            for input in inputs:
                api.enqueue("bench.noop", input)
        return time.perf_counter() - started

    def raw_insert() -> float:
        _empty("bench_raw_run")
        with raw_connect() as conn:
            started = time.perf_counter()
            run_ids = [str(uuid.uuid4()) for _ in inputs]
            encoded = [json.dumps(input, separators=(",", ":")) for input in inputs]
            conn.execute(RAW_INSERT_MANY, {"run_ids": run_ids, "inputs": encoded, "policy": policy})
            return time.perf_counter() - started

    def raw_copy() -> float:
        _empty("bench_raw_run")
        with raw_connect() as conn:
            started = time.perf_counter()
            with conn.cursor().copy(RAW_COPY) as copy:
                for input in inputs:
                    row = (str(uuid.uuid4()), "bench.noop", 1, "pending", json.dumps(input), policy, "default", 0)
                    copy.write_row(row)
            return time.perf_counter() - started

    batch(), raw_insert(), raw_copy()  # warm-up
    timings: dict[str, list[float]] = {"batch": [], "insert": [], "copy": [], "loop": []}
    for round_ in range(ROUNDS):
        timings["batch"].append(batch())
        timings["insert"].append(raw_insert())
        timings["copy"].append(raw_copy())
        if round_ == 0:
            timings["loop"].append(loop())  # seconds each; one round is plenty
    best = {side: min(values) for side, values in timings.items()}
    rate = {side: n / seconds for side, seconds in best.items()}
    record(
        f"enqueue_many of {n:,} vs a loop of api.enqueue in one transaction",
        f"{rate['batch']:,.0f} vs {rate['loop']:,.0f} runs/s",
        f"{rate['batch'] / rate['loop']:.0f}x",
        ">= 10x",
    )
    spread = statistics.pstdev(timings["batch"]) / statistics.mean(timings["batch"])
    record(
        f"enqueue_many of {n:,} vs a raw multi-row INSERT of the same rows (binary arrays)",
        f"{rate['batch']:,.0f} vs {rate['insert']:,.0f} runs/s (enqueue_many's rounds spread {spread:.0%})",
        f"{rate['batch'] / rate['insert']:.2f}",
        ">= 0.8",
    )
    record(
        f"enqueue_many of {n:,} vs a raw COPY of the same rows",
        f"{rate['batch']:,.0f} vs {rate['copy']:,.0f} runs/s",
        f"{rate['batch'] / rate['copy']:.2f}",
    )


def main(n: int, processes: int) -> None:
    print(f"fan-out and bulk enqueue, {n:,} runs", flush=True)
    enqueue_many_vs_loop_and_raw(n)
    spawn_many_vs_spawn_loop(n)
    gather(n, processes)
