"""Ten million finished runs and a million pending, against small tables on the same server.

The big tables live in the benchmark's database; the small ones in a second
database on the same server (the ``small`` alias of bench/settings.py), built
by the same statements a thousand times smaller. Every measurement alternates
between the two, round after round, so drift from the other users of the
machine hits both sides: enqueue, claim+complete, the admin's listing, overview
and a run page (through Django's test client, timed in-process, so server-side),
``durable_health``, and purge.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable, Iterator
from datetime import datetime

from .common import raw_connect, record, reset_tables

SMALL = "small"
BIG = "default"
SIDES = (SMALL, BIG)
# The small tables are this many times smaller than the big ones.
SCALE = 1000
# Runs per INSERT ... SELECT: one transaction each.
CHUNK = 200_000
# Finished runs landed over this many days before the pending ones, oldest first in the heap.
SPAN_DAYS = 30
# Runs enqueued, and claimed+completed, per round and side.
ROUND_RUNS = 2000
ROUNDS = 3
# The input ({"order": n}) that the search by input looks for.
SEARCHED = 500
# Requests per page and side after a warm-up; the median is reported.
REQUESTS = 5
# What each page may take, and the most queries it may run.
PAGE_BUDGET_MS = 50.0
MAX_QUERIES = 20

# Finished runs number ``first`` to ``last`` of ``total``: run 1 is the oldest, landed SPAN_DAYS before the newest,
# each with three journal entries. A realistic mix: 94% succeeded, 4% failed, 2% cancelled, four functions, a
# tenant on one run in ten, an idempotency key on one in five. Run ids are random UUIDs, as api.enqueue makes them.
MAKE_FINISHED = """
WITH made AS (
    INSERT INTO durable_run (run_id, name, version, status, input, output, error, error_type, retry_policy,
                             attempts, failures, tenant_id, idempotency_key, worker_id, created_at, updated_at,
                             started_at, claimed_at, attempt_started_at, finished_at)
    SELECT gen_random_uuid()::text, f.name, 1, s.status, jsonb_build_object('order', i),
           CASE WHEN s.status = 'succeeded' THEN '{"ok": true}'::jsonb END,
           CASE WHEN s.status = 'failed' THEN 'Traceback (most recent call last): ... ValueError: bad order' END,
           CASE WHEN s.status = 'failed' THEN 'builtins.ValueError' END,
           '{}', 1, CASE WHEN s.status = 'failed' THEN 1 ELSE 0 END,
           CASE WHEN i %% 10 = 0 THEN ('00000000-0000-4000-8000-00000000000' || (i / 10 %% 10))::uuid END,
           CASE WHEN i %% 5 = 0 THEN ':order-' || i END,
           'host-' || i %% 4 || ':100:abcdef',
           t.created, t.created + interval '1 second', t.created + interval '0.5 second',
           t.created + interval '0.5 second', t.created + interval '0.5 second', t.created + interval '1 second'
    FROM generate_series(%(first)s::int, %(last)s::int) i
    CROSS JOIN LATERAL (
        SELECT %(newest)s::timestamptz - make_interval(secs => (%(total)s::int - i) * %(spacing)s::float8) AS created
    ) t
    CROSS JOIN LATERAL (
        SELECT (ARRAY['bench.steps', 'shop.charge', 'shop.email', 'report.build'])[1 + i %% 4] AS name
    ) f
    CROSS JOIN LATERAL (
        SELECT CASE WHEN i %% 25 = 1 THEN 'failed' WHEN i %% 50 = 2 THEN 'cancelled' ELSE 'succeeded' END AS status
    ) s
    RETURNING run_id, tenant_id, created_at
)
INSERT INTO durable_step (run_id, step_id, result, tenant_id, created_at)
SELECT run_id, 'v1:noop:' || n, '{"n": 1}', tenant_id, created_at + interval '0.6 second'
FROM made, generate_series(0, 2) n
"""

# Pending no-op runs enqueued over the last hour, oldest first, due now: a backlog the claims take from.
MAKE_PENDING = """
INSERT INTO durable_run (run_id, name, version, status, input, retry_policy, created_at, updated_at)
SELECT gen_random_uuid()::text, 'bench.noop', 1, 'pending', jsonb_build_object('order', i), '{}', t.created, t.created
FROM generate_series(%(first)s::int, %(last)s::int) i
CROSS JOIN LATERAL (SELECT now() - make_interval(secs => (%(total)s::int - i) * 3600.0 / %(total)s::int) AS created) t
"""

# The landing time below which ``count`` finished runs (of the oldest) lie, read through the purge index.
PURGE_CUTOFF = """
SELECT updated_at FROM durable_run WHERE status = 'succeeded' ORDER BY updated_at OFFSET %(succeeded)s LIMIT 1
"""

SIZES = """
SELECT pg_total_relation_size('durable_run'), pg_indexes_size('durable_run'),
       pg_total_relation_size('durable_step'), (SELECT count(*) FROM durable_run WHERE status = 'pending')
"""


def connect(alias: str):
    """A psycopg connection in autocommit to one side's database."""
    import psycopg
    from django.db import connections

    return psycopg.connect(**connections[alias].get_connection_params(), autocommit=True)


@contextlib.contextmanager
def on(alias: str) -> Iterator[None]:
    """Point the durable app (store, API, admin) at one side's database."""
    from django.conf import settings
    from django.test import override_settings

    with override_settings(DURABLE={**settings.DURABLE, "DATABASE": alias}):
        yield


def create_small_database() -> None:
    """Create (or empty) the small side's database and migrate it."""
    from django.core.management import call_command
    from django.db import connections

    name = connections[SMALL].settings_dict["NAME"]
    with raw_connect() as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
            conn.execute(f'CREATE DATABASE "{name}"')
    call_command("migrate", database=SMALL, verbosity=0)
    with connect(SMALL) as conn:
        conn.execute("TRUNCATE durable_run, durable_step, durable_signal, durable_worker")


def build_finished(alias: str, finished: int) -> float:
    """Make ``finished`` runs with their journals, set-based, then VACUUM ANALYZE; seconds."""
    started = time.perf_counter()
    spacing = SPAN_DAYS * 86400.0 / finished
    with connect(alias) as conn:
        # The newest finished run landed just before the oldest pending one is enqueued (build_pending).
        newest: datetime = conn.execute("SELECT now() - interval '1 hour 1 minute'").fetchone()[0]
        for first in range(1, finished + 1, CHUNK):
            last = min(first + CHUNK - 1, finished)
            params = {"first": first, "last": last, "total": finished, "newest": newest, "spacing": spacing}
            conn.execute(MAKE_FINISHED, params)
            if finished > CHUNK:
                print(f"  {alias}: {last} finished runs ({time.perf_counter() - started:.0f}s)", flush=True)
        conn.execute("VACUUM ANALYZE durable_run")
        conn.execute("VACUUM ANALYZE durable_step")
    return time.perf_counter() - started


def build_pending(alias: str, pending: int) -> float:
    """Make ``pending`` runs enqueued over the last hour, set-based, then VACUUM ANALYZE; seconds."""
    started = time.perf_counter()
    with connect(alias) as conn:
        for first in range(1, pending + 1, CHUNK):
            conn.execute(MAKE_PENDING, {"first": first, "last": min(first + CHUNK - 1, pending), "total": pending})
        conn.execute("VACUUM ANALYZE durable_run")
    return time.perf_counter() - started


# -- the measurements: each takes the side's alias (the durable app already points at it) ---------------------


def enqueue_rate(alias: str) -> float:
    from durable_django import api

    started = time.perf_counter()
    for _ in range(ROUND_RUNS):
        api.enqueue("bench.noop")
    return ROUND_RUNS / (time.perf_counter() - started)


def claim_complete_rate(alias: str) -> float:
    """Claim 10 at a time and land them in one statement, as a worker does, ROUND_RUNS runs just enqueued.

    They come first (priority 1) on both sides, ahead of the backlog: what a worker claims is what was
    enqueued lately, rows not yet vacuumed (the backlog's were, at its build).
    """
    from durable_django import api
    from durable_django.store import claims, landing
    from durable_django.worker.loop import WorkerOptions

    for _ in range(ROUND_RUNS):
        api.enqueue("bench.noop", priority=1)
    bounds = WorkerOptions(functions=["bench.noop"]).claim_bounds()
    done = 0
    started = time.perf_counter()
    while done < ROUND_RUNS:
        claimed = claims.claim(limit=10, start_now=10, lease_seconds=30, worker_id="bench", bounds=bounds)
        assert claimed, f"{alias}: nothing to claim after {done}"
        landing.complete_many([landing.Finished(item.run.run_id, item.run.attempts, "null", None) for item in claimed])
        done += len(claimed)
    return done / (time.perf_counter() - started)


def alternate(measure: Callable[[str], float], rounds: int = ROUNDS) -> dict[str, list[float]]:
    """``measure`` on each side, alternating, ``rounds`` times."""
    results: dict[str, list[float]] = {alias: [] for alias in SIDES}
    for _ in range(rounds):
        for alias in SIDES:
            with on(alias):
                results[alias].append(measure(alias))
    print(f"  {measure.__name__}: " + ", ".join(f"{alias} {results[alias]}" for alias in SIDES), flush=True)
    return results


def record_ratio(label: str, results: dict[str, list[float]], unit: str, target: str) -> None:
    small, big = statistics.median(results[SMALL]), statistics.median(results[BIG])
    record(label, f"{big:.0f} vs {small:.0f} {unit}", f"{big / small:.2f}", target)


class QueryClock:
    """Counts and times the statements every connection in use runs (Django's execute wrappers)."""

    def __init__(self):
        self.count = 0
        self.seconds = 0.0

    def __call__(self, execute, sql, params, many, context):
        started = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            self.seconds += time.perf_counter() - started
            self.count += 1

    @contextlib.contextmanager
    def watching(self) -> Iterator[QueryClock]:
        from django.db import connections

        with contextlib.ExitStack() as stack:
            for alias in SIDES:
                stack.enter_context(connections[alias].execute_wrapper(self))
            yield self


def timed(call: Callable[[], object]) -> tuple[float, float, int]:
    """(median ms of REQUESTS calls after a warm-up, median ms its statements took, statements per call)."""
    call()
    totals, sql, counts = [], [], []
    for _ in range(REQUESTS):
        with QueryClock().watching() as clock:
            started = time.perf_counter()
            call()
            totals.append((time.perf_counter() - started) * 1000)
        sql.append(clock.seconds * 1000)
        counts.append(clock.count)
    return statistics.median(totals), statistics.median(sql), max(counts)


def admin_client():
    from django.contrib.auth.models import User
    from django.test import Client

    user = User.objects.filter(username="bench-admin").first() or User.objects.create_superuser(
        "bench-admin", "bench@example.com", "bench"
    )
    client = Client()
    client.force_login(user)
    return client


def page(client, url: str) -> Callable[[], object]:
    def get() -> object:
        response = client.get(url)
        assert response.status_code == 200, (url, response.status_code)
        return response

    return get


# One of the ten tenants the finished runs are spread over (MAKE_FINISHED).
BENCH_TENANT = "00000000-0000-4000-8000-000000000003"

# A finished run from the middle of the side's history, with its three journal entries.
MIDDLE_RUN = """
SELECT run_id FROM durable_run
WHERE status = 'succeeded'
  AND created_at <= (SELECT min(created_at) + (max(created_at) - min(created_at)) / 2 FROM durable_run)
ORDER BY created_at DESC LIMIT 1
"""


def sample_run_id(alias: str) -> str:
    with connect(alias) as conn:
        run_id: str = conn.execute(MIDDLE_RUN).fetchone()[0]
        return run_id


def views(client) -> dict[str, Callable[[str], Callable[[], object]]]:
    """What is timed on each side: name -> (alias -> call)."""
    from django.contrib.admin.utils import quote

    from durable_django import api
    from durable_django.api import operations

    listing = "/admin/durable_django/run/"
    # Run number SEARCHED exists on both sides (its finished run and its pending one): a search by input finds
    # those through the input's GIN index however many runs there are.
    return {
        "admin: runs listing": lambda alias: page(client, listing),
        "admin: listing, status=failed": lambda alias: page(client, f"{listing}?status=failed"),
        # Behind a backlog of pending runs of another function: read through the listing index, the filter
        # would pass every one of them first.
        "admin: listing, function=shop.charge": lambda alias: page(client, f"{listing}?function=shop.charge"),
        "admin: listing, tenant": lambda alias: page(client, f"{listing}?tenant={BENCH_TENANT}"),
        "admin: a run's page": lambda alias: page(client, f"{listing}{quote(sample_run_id(alias))}/change/"),
        "admin: listing, input search": lambda alias: page(client, f"{listing}?q=input.order={SEARCHED}"),
        "list_runs(input_contains=...)": lambda alias: lambda: api.list_runs(input_contains={"order": SEARCHED}),
        "overview (operations.overview)": lambda alias: operations.overview,
        "durable_health (operations.health)": lambda alias: lambda: operations.health(max_oldest_pending=60),
    }


def measure_views() -> None:
    """Each page and call, alternating sides: its server-side time, the part its statements took, how many."""
    client = admin_client()
    for label, make in views(client).items():
        results: dict[str, list[tuple[float, float, int]]] = {alias: [] for alias in SIDES}
        for _ in range(ROUNDS):
            for alias in SIDES:
                with on(alias):
                    results[alias].append(timed(make(alias)))
        total = {alias: statistics.median(t for t, _, _ in results[alias]) for alias in SIDES}
        sql = {alias: statistics.median(s for _, s, _ in results[alias]) for alias in SIDES}
        queries = max(count for side in results.values() for _, _, count in side)
        # The health check is not a page: its budget is the probe's, not the admin's.
        budget = "" if "health" in label else f"< {PAGE_BUDGET_MS:.0f} ms, <= {MAX_QUERIES} queries"
        record(
            label,
            f"{total[BIG]:.0f} (SQL {sql[BIG]:.0f}) vs {total[SMALL]:.0f} (SQL {sql[SMALL]:.0f}) ms, {queries} queries",
            f"{total[BIG] / total[SMALL]:.2f}",
            budget,
        )


def purge_rate(alias: str, runs: int) -> tuple[int, float]:
    """Purge the oldest ``runs`` finished runs (about) in batches of 1,000, as api.purge_finished does."""
    from durable_django.store import purge

    with connect(alias) as conn:
        cutoff = conn.execute(PURGE_CUTOFF, {"succeeded": int(runs * 0.94)}).fetchone()[0]
    deleted, position = 0, None
    started = time.perf_counter()
    while True:
        count, position = purge.purge_batch(cutoff, 1000, position)
        deleted += count
        if position is None:
            return deleted, deleted / (time.perf_counter() - started)


def report_sizes() -> None:
    for alias in SIDES:
        with connect(alias) as conn:
            runs, indexes, steps, pending = conn.execute(SIZES).fetchone()
        mb = 1024 * 1024
        record(
            f"tables ({alias})",
            f"durable_run {runs / mb:.0f} MB (indexes {indexes / mb:.0f} MB), durable_step {steps / mb:.0f} MB, "
            f"{pending} pending",
        )


def main(runs: int, pending: int, purge_runs: int, sustained_minutes: float) -> None:
    """Build both sides; the sustained load (bench_bloat) runs on the big table before its pending backlog is
    made (the load's workers would drain it); then every measurement, alternating sides."""
    from . import bench_bloat

    began = time.perf_counter()
    small_runs, small_pending = max(runs // SCALE, 1000), max(pending // SCALE, 100)
    print(
        f"{runs} finished runs x 3 steps + {pending} pending vs {small_runs} + {small_pending} "
        "on the same server",
        flush=True,
    )
    reset_tables()
    create_small_database()
    # First, while nothing else writes: the update costs are read from the server's WAL position.
    bench_bloat.update_costs()
    # The small side also holds the runs its purge will delete, older than the rest.
    made = build_finished(SMALL, small_runs + purge_runs) + build_pending(SMALL, small_pending)
    print(f"  small side built in {made:.1f}s", flush=True)
    finished_in = build_finished(BIG, runs)
    record(
        "build big: finished runs (INSERT ... SELECT, VACUUM ANALYZE)",
        f"{runs} runs + {runs * 3} steps in {finished_in:.0f}s",
    )
    if sustained_minutes > 0:
        bench_bloat.sustained(sustained_minutes)
    pending_in = build_pending(BIG, pending)
    record("build big: pending runs (INSERT ... SELECT, VACUUM ANALYZE)", f"{pending} runs in {pending_in:.0f}s")
    report_sizes()

    record_ratio("enqueue, big / small", alternate(enqueue_rate), "runs/s", ">= 0.90")
    record_ratio("claim(10)+complete, big / small", alternate(claim_complete_rate), "runs/s", ">= 0.90")
    measure_views()
    purged: dict[str, list[float]] = {}
    for alias in SIDES:
        with on(alias):
            deleted, rate = purge_rate(alias, purge_runs)
        purged[alias] = [rate]
        print(f"  {alias}: purged {deleted} runs at {rate:.0f}/s", flush=True)
    record_ratio("purge (batches of 1,000), big / small", purged, "runs/s", "")
    record("--big, start to end", f"{(time.perf_counter() - began) / 60:.0f} min")
