"""What a run costs PostgreSQL, and how throughput moves with worker processes.

On one machine throughput stops at its cores, which the workers and the server
share here; what carries over to a bigger server is the server's own cost per
run. So each round measures, beside runs/s, the CPU time of every server process
(the postmaster with the children it reaped, and the live ones) and the WAL
written, per run: to enqueue it, and to claim, execute (journal its steps) and
land it. A core divided by the server's CPU per run is that core's ceiling, an
upper bound that holds only while nothing else (WAL flushes, the claim index's
head, locks) gives out first. The server's processes are read in ``/proc``,
so this needs the server on this machine (the embedded one is).
"""

from __future__ import annotations

import glob
import os
import time
from dataclasses import dataclass

from . import common
from .bench_e2e import enqueue_noops
from .common import raw_connect, record, reset_tables

TICKS = os.sysconf("SC_CLK_TCK")
# How often the drain counts finished runs: each count is a query, which the server's CPU figure includes.
POLL = 0.1


def _times(pid: str) -> list[int]:
    """utime, stime, cutime, cstime and the parent's pid of a process (after its name, which may hold spaces)."""
    with open(f"/proc/{pid}/stat") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return [int(fields[11]), int(fields[12]), int(fields[13]), int(fields[14]), int(fields[1])]


def server_cpu_seconds(postmaster: str) -> float:
    """CPU time the server has used: its postmaster's with its reaped children's, and its live children's."""
    total = sum(_times(postmaster)[:4])
    for path in glob.glob("/proc/[0-9]*"):
        try:
            utime, stime, _, _, parent = _times(path.rsplit("/", 1)[1])
        except (OSError, IndexError, ValueError):
            continue  # gone since the listing
        if str(parent) == postmaster:
            total += utime + stime
    return total / TICKS


def postmaster_pid() -> str:
    with raw_connect() as conn:
        data_directory = conn.execute("SHOW data_directory").fetchone()[0]
    with open(os.path.join(data_directory, "postmaster.pid")) as handle:
        return handle.readline().strip()


# Finished runs, WAL written so far, and the client sessions other than this one (the workers').
PROGRESS = """
SELECT (SELECT count(*) FROM durable_run WHERE status = 'succeeded'),
       pg_current_wal_lsn() - '0/0'::pg_lsn,
       (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid())
"""


@dataclass(frozen=True)
class Snapshot:
    at: float
    done: int
    wal: int
    sessions: int
    server_cpu: float
    workers_cpu: float


def snapshot(conn, postmaster: str, workers: list) -> Snapshot:
    done, wal, sessions = conn.execute(PROGRESS).fetchone()
    return Snapshot(
        at=time.monotonic(),
        done=done,
        wal=int(wal),
        sessions=sessions,
        server_cpu=server_cpu_seconds(postmaster),
        workers_cpu=sum(sum(_times(str(worker.pid))[:2]) for worker in workers) / TICKS,
    )


def measure(postmaster: str, runs: int, processes: int, concurrency: int, steps: int) -> dict[str, float]:
    """One round: enqueue ``runs``, then drain them with long-running workers; the rate and costs per run.

    The drain is measured from the tenth run to the last with the workers still up, so their start-up
    (Django, connections, the server's new backends) is left out, as it is from every rate here.
    """
    reset_tables()
    name, input = ("bench.steps", {"steps": steps}) if steps else ("bench.noop", None)
    with raw_connect() as conn:  # one session for every reading, so none costs the server a new backend
        before = snapshot(conn, postmaster, [])
        enqueue_noops(runs, name, input)
        enqueued = snapshot(conn, postmaster, [])
        workers = [common.spawn(common.worker_command(concurrency)) for _ in range(processes)]
        first = None
        deadline = time.monotonic() + 600
        try:
            while True:
                now = snapshot(conn, postmaster, workers)
                if first is None and now.done >= runs // 10:
                    first = now
                if now.done >= runs:
                    last = now
                    break
                if time.monotonic() > deadline or any(worker.poll() is not None for worker in workers):
                    errors = "".join(common.error_output(worker) for worker in workers)
                    raise RuntimeError(f"the drain stopped at {now.done}/{runs}: {errors[-2000:]}")
                time.sleep(POLL)
        finally:
            common.stop(workers)
    counted = last.done - first.done
    return {
        "rate": counted / (last.at - first.at),
        "enqueue_us": (enqueued.server_cpu - before.server_cpu) / runs * 1e6,
        "execute_us": (last.server_cpu - first.server_cpu) / counted * 1e6,
        "enqueue_wal": (enqueued.wal - before.wal) / runs,
        "execute_wal": (last.wal - first.wal) / counted,
        "workers_us": (last.workers_cpu - first.workers_cpu) / counted * 1e6,
        # The enqueuing session (Django's) is still open; the rest are the workers'.
        "sessions_per_worker": (last.sessions - 1) / processes,
    }


def main(runs: int, process_counts: list[int], concurrency: int = 8) -> None:
    print(f"server cost per run and throughput by worker processes ({runs} runs per round)", flush=True)
    try:
        postmaster = postmaster_pid()
    except OSError as exc:
        record("scale: server CPU per run", f"not measured: the server is not on this machine ({exc})")
        return
    for steps in (0, 3):
        workload = f"{steps}-step runs" if steps else "no-op runs"
        per_run = []
        for processes in process_counts:
            cost = measure(postmaster, runs, processes, concurrency, steps)
            per_run.append(cost["enqueue_us"] + cost["execute_us"])
            record(
                f"{workload}, {processes} proc x {concurrency} threads",
                f"{cost['rate']:.0f} runs/s; server CPU {cost['enqueue_us']:.0f} + {cost['execute_us']:.0f} us, "
                f"WAL {cost['enqueue_wal']:.0f} + {cost['execute_wal']:.0f} B per run (enqueue + execution); "
                f"workers {cost['workers_us']:.0f} us CPU per run; "
                f"{cost['sessions_per_worker']:.0f} sessions per worker",
            )
        low, high = max(per_run), min(per_run)
        record(
            f"{workload}: one server core's ceiling (extrapolated)",
            f"{1e6 / low:.0f} to {1e6 / high:.0f} runs/s (1 s / {low:.0f} to {high:.0f} us of server CPU per run)",
        )
