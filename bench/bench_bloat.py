"""What each kind of update to durable_run costs, and whether the table stays bounded under load.

First each kind of update a run goes through (claim, lease renewal, progress
write, landing) is made alone on 2,000 held runs, and ``pg_stat_user_tables``
says how many of them were heap-only (HOT: no index touched) and the WAL says
how many bytes each cost. The same is measured for a heartbeat on a table
without the lease index (what a heap-only heartbeat would save), with the time
a claim takes while 2,000 runs are held, with and without that index (what it
would cost the claims); these run in the ``small`` database of
bench/settings.py. The sustained load runs on the benchmark's own table, the
finished runs bench_big (or ``main``) made being its cold bulk: real worker
processes run no-op runs and runs that heartbeat and report progress, fed at a
steady rate, while the runs it landed are purged after a minute, for
``--sustained-minutes``; the run table's heap and index sizes are sampled every
30 seconds.
"""

from __future__ import annotations

import contextlib
import itertools
import statistics
import threading
import time

from . import common
from .bench_big import SMALL, connect, create_small_database, on
from .common import record

HELD = 2000
# Runs claimed (10 at a time) per round of the claim timing.
ROUND = 1000
# Progress writes and renewals per held run.
REPEATS = 3
# Of the sustained load: no-op runs and working runs enqueued per second, how long a working run works,
# the lease (a renewal every third of it), and how old a finished run is when it is purged.
NOOPS_PER_SECOND = 40
WORKING_PER_SECOND = 8
WORK_SECONDS = 6.0
LEASE_SECONDS = 6.0
PURGE_AFTER_SECONDS = 60.0
SAMPLE_SECONDS = 30.0

STATS = """
SELECT n_tup_upd, n_tup_hot_upd, pg_current_wal_lsn() FROM pg_stat_user_tables WHERE relname = 'durable_run'
"""
SIZES = """
SELECT pg_relation_size('durable_run'), pg_indexes_size('durable_run'), n_live_tup, n_dead_tup,
       autovacuum_count, n_tup_upd, n_tup_hot_upd
FROM pg_stat_user_tables WHERE relname = 'durable_run'
"""
LEASE_INDEX = "CREATE INDEX durable_run_leases ON durable_run (leased_until) WHERE status = 'running'"


def counters(conn) -> tuple[int, int, int]:
    """(updates, heap-only updates, WAL position) of durable_run, once the statistics have been flushed.

    The WAL position is the server's: measured while nothing else writes (full-page images included).
    """
    time.sleep(1.2)  # a backend flushes its table statistics at most once a second
    conn.execute("SELECT pg_stat_clear_snapshot()")
    upd, hot, lsn = conn.execute(STATS).fetchone()
    wal = conn.execute("SELECT %s::pg_lsn - '0/0'::pg_lsn", [lsn]).fetchone()[0]
    return upd, hot, int(wal)


class Kinds:
    """Each kind of update made alone; ``measure`` records (updates, HOT share, WAL bytes per update)."""

    def __init__(self, conn):
        self.conn = conn
        self.results: dict[str, tuple[int, float, float]] = {}

    @contextlib.contextmanager
    def measure(self, kind: str):
        from django.db import connections

        connections.close_all()  # the next statement comes from a fresh backend; this one's statistics flush
        upd0, hot0, wal0 = counters(self.conn)
        yield
        connections.close_all()
        upd1, hot1, wal1 = counters(self.conn)
        updates = upd1 - upd0
        self.results[kind] = (updates, (hot1 - hot0) / updates if updates else 0.0, (wal1 - wal0) / max(updates, 1))


def enqueue(n: int) -> None:
    from durable_django import api

    for _ in range(n):
        api.enqueue("bench.noop")


def claim_all() -> list[tuple[str, int]]:
    """Claim every pending no-op run with a long lease; their (run_id, token) pairs."""
    from durable_django.store import claims
    from durable_django.worker.loop import WorkerOptions

    bounds = WorkerOptions(functions=["bench.noop"]).claim_bounds()
    held: list[tuple[str, int]] = []
    while True:
        claimed = claims.claim(limit=10, start_now=10, lease_seconds=300, worker_id="bench", bounds=bounds)
        if not claimed:
            return held
        held.extend((item.run.run_id, item.run.attempts) for item in claimed)


def update_kinds(conn, label: str) -> dict[str, tuple[int, float, float]]:
    """Claims, renewals, progress writes and landings of HELD runs, each kind alone."""
    from durable_django.store import landing, leases, progress

    conn.execute("TRUNCATE durable_run, durable_step, durable_signal")
    kinds = Kinds(conn)
    enqueue(HELD)
    with kinds.measure("claim"):
        held = claim_all()
    with kinds.measure("heartbeat"):
        for _ in range(REPEATS):
            for start in range(0, len(held), 100):
                leases.heartbeat(held[start : start + 100], 300)
    with kinds.measure("progress"):
        for beat in range(REPEATS):
            for run_id, token in held:
                progress.set_progress(run_id, token, f'{{"done": {beat + 1}, "of": {REPEATS}}}')
    with kinds.measure("landing"):
        for start in range(0, len(held), 10):
            landing.complete_many(
                [landing.Finished(run_id, token, "null", None) for run_id, token in held[start : start + 10]]
            )
    for kind, (updates, hot, wal) in kinds.results.items():
        print(f"  {label}: {kind}: {updates} updates, {hot:.0%} heap-only, {wal:.0f} WAL bytes each", flush=True)
    return kinds.results


def claim_ms() -> float:
    """Median milliseconds of a claim of 10 while HELD runs are running: ROUND new runs claimed, each batch
    completed outside the timing."""
    from durable_django.store import claims, landing
    from durable_django.worker.loop import WorkerOptions

    bounds = WorkerOptions(functions=["bench.noop"]).claim_bounds()
    enqueue(ROUND)
    times = []
    while True:
        started = time.perf_counter()
        claimed = claims.claim(limit=10, start_now=10, lease_seconds=30, worker_id="bench", bounds=bounds)
        times.append((time.perf_counter() - started) * 1000)
        if not claimed:
            return statistics.median(times)
        landing.complete_many([landing.Finished(item.run.run_id, item.run.attempts, "null", None) for item in claimed])


def update_costs() -> None:
    """Each kind of update alone; then what the lease index costs a heartbeat, and what it saves a claim."""
    print("the cost of each kind of update to durable_run", flush=True)
    with connect(SMALL) as conn:
        fillfactor = conn.execute(
            "SELECT coalesce((SELECT option_value FROM pg_options_to_table("
            "(SELECT reloptions FROM pg_class WHERE relname = 'durable_run')) WHERE option_name = 'fillfactor'), '100')"
        ).fetchone()[0]
        with on(SMALL):
            kinds = update_kinds(conn, f"fillfactor {fillfactor}")
            for kind, (updates, hot, wal) in kinds.items():
                record(f"update kind: {kind}", f"{updates} updates, {wal:.0f} WAL bytes each", f"HOT {hot:.2f}")
            conn.execute("DROP INDEX durable_run_leases")
            try:
                without = update_kinds(conn, "no lease index")["heartbeat"]
                latencies: dict[bool, list[float]] = {True: [], False: []}
                # Claims while HELD runs are running (the held ones stay claimed: their lease is 300 s).
                conn.execute("TRUNCATE durable_run, durable_step, durable_signal")
                enqueue(HELD)
                claim_all()
                for _ in range(3):
                    for indexed in (False, True):
                        if indexed:
                            conn.execute(LEASE_INDEX)
                        conn.execute("ANALYZE durable_run")
                        latencies[indexed].append(claim_ms())
                        if indexed:
                            conn.execute("DROP INDEX durable_run_leases")
            finally:
                conn.execute(LEASE_INDEX)
    with_index = kinds["heartbeat"]
    record(
        "heartbeat without / with the lease index",
        f"HOT {without[1]:.2f} vs {with_index[1]:.2f}, {without[2]:.0f} vs {with_index[2]:.0f} WAL bytes each",
        f"{without[2] / with_index[2]:.2f}",
    )
    no_index, indexed = statistics.median(latencies[False]), statistics.median(latencies[True])
    record(
        f"a claim of 10 with {HELD} runs held, without / with the lease index",
        f"{no_index:.2f} vs {indexed:.2f} ms",
        f"{no_index / indexed:.2f}",
    )


# -- the sustained load ----------------------------------------------------------------------------------


class Feeder(threading.Thread):
    """Enqueues no-op and working runs at a steady rate, and purges those landed over a minute ago.

    The purge starts its keyset after ``since`` (when the load started), so the finished runs the table held
    before stay: they are the cold bulk a large site carries, and the load's own runs its live part.
    """

    def __init__(self, since):
        super().__init__(daemon=True)
        self.since = since
        self.stop_event = threading.Event()
        self.error: BaseException | None = None
        self.enqueued = 0
        self.purged = 0

    def run(self):
        from datetime import timedelta

        from django.db import connections
        from django.utils import timezone

        from durable_django import api
        from durable_django.store import purge

        tick_seconds = 0.1
        next_purge = time.monotonic() + 10
        try:
            tick = time.monotonic()
            while not self.stop_event.is_set():
                for _ in range(round(NOOPS_PER_SECOND * tick_seconds)):
                    api.enqueue("bench.noop")
                for _ in range(round(WORKING_PER_SECOND * tick_seconds)):
                    api.enqueue("bench.working", {"seconds": WORK_SECONDS, "reports": 3})
                self.enqueued += round((NOOPS_PER_SECOND + WORKING_PER_SECOND) * tick_seconds)
                if time.monotonic() >= next_purge:
                    cutoff, position = timezone.now() - timedelta(seconds=PURGE_AFTER_SECONDS), (self.since, "")
                    while position is not None:
                        deleted, position = purge.purge_batch(cutoff, 1000, position)
                        self.purged += deleted
                    next_purge = time.monotonic() + 10
                tick += tick_seconds
                self.stop_event.wait(max(tick - time.monotonic(), 0))
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            self.error = exc
        finally:
            connections.close_all()


def sample(conn, started: float) -> tuple:
    conn.execute("SELECT pg_stat_clear_snapshot()")
    heap, indexes, live, dead, autovacuums, updates, hot = conn.execute(SIZES).fetchone()
    return (time.monotonic() - started, heap, indexes, live, dead, autovacuums, updates, hot)


def sustained(minutes: float) -> None:
    """The load on the benchmark's table as it is (bench_big's finished runs, or those main makes)."""
    from .bench_big import BIG

    with connect(BIG) as conn:
        conn.execute("TRUNCATE durable_worker")
    print(
        f"sustained load for {minutes:g} min: {NOOPS_PER_SECOND} no-op + {WORKING_PER_SECOND} working "
        f"runs/s ({WORK_SECONDS:g}s each, 3 progress writes, lease {LEASE_SECONDS:g}s), purged after "
        f"{PURGE_AFTER_SECONDS:g}s",
        flush=True,
    )
    with connect(BIG) as conn:
        since = conn.execute("SELECT now()").fetchone()[0]
        workers = [
            common.spawn(common.worker_command(32), env={"BENCH_LEASE_SECONDS": str(LEASE_SECONDS)}) for _ in range(2)
        ]
        feeder = Feeder(since)
        started = time.monotonic()
        samples = [sample(conn, started)]
        try:
            feeder.start()
            while time.monotonic() - started < minutes * 60:
                time.sleep(SAMPLE_SECONDS)
                if feeder.error is not None:
                    raise feeder.error
                if any(worker.poll() is not None for worker in workers):
                    raise RuntimeError("a worker exited: " + "".join(common.error_output(w) for w in workers)[-2000:])
                samples.append(sample(conn, started))
                at, heap, indexes, live, dead, autovacuums = samples[-1][:6]
                print(
                    f"  {at:.0f}s: heap {heap / 2**20:.1f} MB, indexes {indexes / 2**20:.1f} MB, "
                    f"{live} live / {dead} dead tuples, {autovacuums - samples[0][5]} autovacuums",
                    flush=True,
                )
        finally:
            feeder.stop_event.set()
            feeder.join()
            common.stop(workers)
        landed = conn.execute(
            "SELECT count(*) FROM durable_run WHERE status = 'succeeded' AND updated_at >= %s", [since]
        ).fetchone()[0]
        # What one of those autovacuums costs (unthrottled here): the heap's changed pages and every index.
        began = time.perf_counter()
        conn.execute("VACUUM durable_run")
        vacuum_seconds = time.perf_counter() - began
    report_sustained(samples, feeder, minutes, landed)
    record("VACUUM durable_run (every index) after the load", f"{vacuum_seconds:.1f}s")


def report_sustained(samples, feeder: Feeder, minutes: float, landed: int) -> None:
    """Growth of the heap and the indexes in each third of the load: bounded when the last third adds ~nothing."""
    mb = 2**20
    end = samples[-1][0]
    thirds = [min(samples, key=lambda s, at=at: abs(s[0] - at)) for at in (0, end / 3, 2 * end / 3, end)]
    for column, what in ((1, "heap"), (2, "indexes")):
        growth = [(b[column] - a[column]) / mb for a, b in itertools.pairwise(thirds)]
        record(
            f"sustained {minutes:g} min: durable_run {what}, growth per third",
            " / ".join(f"{g:+.1f} MB" for g in growth) + f" (end {samples[-1][column] / mb:.0f} MB)",
            f"{growth[2] / growth[0]:.2f}" if growth[0] > 0 else "",
            "last third ~0",
        )
    updates = samples[-1][6] - samples[0][6]
    hot = samples[-1][7] - samples[0][7]
    record(
        f"sustained {minutes:g} min: load",
        f"{feeder.enqueued} enqueued, {landed} landed, {feeder.purged} purged, "
        f"{samples[-1][5] - samples[0][5]} autovacuums, at most {max(s[4] for s in samples)} dead tuples",
        f"HOT {hot / updates:.2f}" if updates else "",
    )


def main(minutes: float, cold_runs: int) -> None:
    """The cost of each kind of update, then the sustained load on ``cold_runs`` finished runs (made here)."""
    from .bench_big import BIG, build_finished

    common.reset_tables()
    create_small_database()
    update_costs()
    if minutes > 0:
        print(f"  making {cold_runs} finished runs as the table's cold bulk", flush=True)
        build_finished(BIG, cold_runs)
        sustained(minutes)
