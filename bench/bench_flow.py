"""What flow control and pauses cost the claim, and whether a rate limit is met.

Workers are ``--concurrency 8`` processes (not ``--burst``: a burst worker leaves
when every due run is held behind a key another process runs), stopped once the
runs are drained.
"""

from __future__ import annotations

import bisect
import statistics
import time

from . import common
from .common import raw_connect, record, reset_tables

HOT_KEY = "concurrency:bench.keyed:hot"


def enqueue(name: str, inputs: list[dict]) -> None:
    from durable_django import api

    for input in inputs:
        api.enqueue(name, input)


def drain(name: str, total: int, processes: int) -> float:
    """Runs/s of ``processes`` workers draining the ``total`` runs of ``name`` already enqueued."""

    def done() -> int:
        with raw_connect() as conn:
            return conn.execute(
                "SELECT count(*) FROM durable_run WHERE name = %s AND status = 'succeeded'", [name]
            ).fetchone()[0]

    with raw_connect() as conn:
        conn.execute("VACUUM ANALYZE durable_run")
    workers = [common.spawn(common.worker_command(8)) for _ in range(processes)]
    try:
        return common.rate_while_draining(done, total, workers)
    finally:
        common.stop(workers)


def keys_limited_to_one(runs: int, keys: int, processes: int) -> None:
    """The same runs over ``keys`` keys, each limited to one at a time, vs unlimited."""
    inputs = [{"key": f"k{n % keys}"} for n in range(runs)]
    reset_tables()
    enqueue("bench.unkeyed", inputs)
    unlimited = drain("bench.unkeyed", runs, processes)
    reset_tables()
    enqueue("bench.keyed", inputs)
    limited = drain("bench.keyed", runs, processes)
    record(
        f"{runs} runs over {keys} keys limited to 1 each / unlimited ({processes}x8 workers)",
        f"{limited:,.0f} vs {unlimited:,.0f} runs/s",
        f"{limited / unlimited:.2f}",
        ">= 0.8",
    )


def hold_behind_one_key(held: int) -> None:
    """``held`` due runs held behind one saturated key (its one slot taken by a run that never ends)."""
    with raw_connect() as conn:
        conn.execute(
            """
            INSERT INTO durable_run (run_id, name, version, status, input, retry_policy, queue, priority,
                                     concurrency_key, concurrency_limit, held_by, created_at, updated_at)
            SELECT 'held-' || g, 'bench.keyed', 1, 'pending', '{"key": "hot"}', '{}', 'default', 0,
                   %(key)s, 1, %(key)s, now() - make_interval(secs => g), now()
            FROM generate_series(1, %(held)s) g
            """,
            {"key": HOT_KEY, "held": held},
        )
        conn.execute(
            """
            INSERT INTO durable_run (run_id, name, version, status, input, retry_policy, queue, priority,
                                     concurrency_key, concurrency_limit, attempts, started_at, attempt_started_at,
                                     claimed_at, leased_until, worker_id, created_at, updated_at)
            VALUES ('hot-holder', 'bench.keyed', 1, 'running', '{"key": "hot"}', '{}', 'default', 0, %(key)s, 1,
                    1, now(), now(), now(), now() + interval '1 day', 'elsewhere', now(), now())
            """,
            {"key": HOT_KEY},
        )


def held_runs_do_not_slow_the_claim(runs: int, held: int, processes: int, rounds: int = 3) -> None:
    """No-op runs drained with ``held`` runs held behind one saturated key vs with none: ``rounds`` rounds of
    each side, alternating (none, held, held, none, ...) so that drift in the load of the (shared) machine hits
    both alike; the medians are compared."""
    from durable_django import api

    rates: dict[bool, list[float]] = {False: [], True: []}
    for index in range(2 * rounds):
        beside = index % 4 in (1, 2)
        reset_tables()
        if beside:
            hold_behind_one_key(held)
        api.enqueue_many("bench.noop", [{}] * runs)
        rates[beside].append(drain("bench.noop", runs, processes))
        if beside:
            with raw_connect() as conn:
                still = conn.execute("SELECT count(*) FROM durable_run WHERE held_by = %s", [HOT_KEY]).fetchone()[0]
            assert still == held, f"{held - still} held runs were started: the key's one slot was taken"
    alone, beside_rate = statistics.median(rates[False]), statistics.median(rates[True])
    record(
        f"no-op runs with {held:,} held behind one key / none held ({processes}x8 workers, median of {rounds})",
        f"{beside_rate:,.0f} vs {alone:,.0f} runs/s",
        f"{beside_rate / alone:.2f}",
        ">= 0.9",
    )


def paused_runs_do_not_slow_the_claim(runs: int, paused: int, processes: int, rounds: int = 3) -> None:
    """No-op runs drained beside ``paused`` due runs of a paused function (the workers register it) vs beside
    none, alternating as held_runs_do_not_slow_the_claim does: a paused claim must not read the paused runs."""
    from durable_django import api

    rates: dict[bool, list[float]] = {False: [], True: []}
    for index in range(2 * rounds):
        beside = index % 4 in (1, 2)
        reset_tables()
        api.unpause(function="bench.unkeyed")
        if beside:
            with raw_connect() as conn:
                conn.execute(
                    """
                    INSERT INTO durable_run (run_id, name, version, status, input, retry_policy, queue, priority,
                                             created_at, updated_at)
                    SELECT 'paused-' || g, 'bench.unkeyed', 1, 'pending', '{}', '{}', 'default', 5,
                           now() - interval '1 hour' - make_interval(secs => g), now()
                    FROM generate_series(1, %(paused)s) g
                    """,
                    {"paused": paused},
                )
            api.pause(function="bench.unkeyed", reason="benchmark")
        api.enqueue_many("bench.noop", [{}] * runs)
        rates[beside].append(drain("bench.noop", runs, processes))
        if beside:
            with raw_connect() as conn:
                started = conn.execute(
                    "SELECT count(*) FROM durable_run WHERE name = 'bench.unkeyed' AND attempts > 0"
                ).fetchone()[0]
            assert started == 0, f"{started} runs of the paused function were started"
    api.unpause(function="bench.unkeyed")
    alone, beside_rate = statistics.median(rates[False]), statistics.median(rates[True])
    record(
        f"no-op runs beside {paused:,} due runs of a paused function / none ({processes}x8 workers, "
        f"median of {rounds})",
        f"{beside_rate:,.0f} vs {alone:,.0f} runs/s",
        f"{beside_rate / alone:.2f}",
        ">= 0.9",
    )


def rate_limit_is_met(limit: int, seconds: float, processes: int) -> None:
    """Runs of a function limited to ``limit`` starts a second, more than a minute's worth, drained for
    ``seconds``: the starts per second over that time (from the runs' own start times), the most in any one
    second, the fewest in any whole second, and how long a start that left the window took to be replaced
    (with the window full a start can only take the place of one leaving it, counted RATE_WINDOW_GUARD
    windows after it: the rate is ``limit`` over that window plus the mean of this delay)."""
    from durable_django.store.flow import RATE_WINDOW_GUARD

    reset_tables()
    total = int(limit * (seconds + 15))
    with raw_connect() as conn:  # as api.enqueue would store them, in one statement: enqueueing is not measured
        conn.execute(
            """
            INSERT INTO durable_run (run_id, name, version, status, input, retry_policy, queue, priority,
                                     rate_key, rate_limit, rate_per, created_at, updated_at)
            SELECT gen_random_uuid()::text, 'bench.rated', 1, 'pending', '{}', '{}', 'default', 0,
                   'rate:bench.rated', %(limit)s, 1.0, now() + make_interval(secs => g / 1e6), now()
            FROM generate_series(1, %(total)s) g
            """,
            {"limit": limit, "total": total},
        )
        conn.execute("VACUUM ANALYZE durable_run")
    workers = [common.spawn(common.worker_command(8)) for _ in range(processes)]
    try:
        time.sleep(5)  # start-up and warm-up are not measured
        with raw_connect() as conn:
            start = conn.execute("SELECT extract(epoch FROM now())::float8").fetchone()[0]
        time.sleep(seconds)
        with raw_connect() as conn:
            end = conn.execute("SELECT extract(epoch FROM now())::float8").fetchone()[0]
            starts = [
                at
                for (at,) in conn.execute(
                    "SELECT extract(epoch FROM started_at)::float8 FROM durable_run WHERE started_at IS NOT NULL "
                    "ORDER BY started_at"
                )
            ]
    finally:
        common.stop(workers)
    measured = [index for index, at in enumerate(starts) if start <= at < end]
    rate = len(measured) / (end - start)
    busiest = max(bisect.bisect_left(starts, at + 1.0) - index for index, at in enumerate(starts))
    per_second = [0] * int(end - start)
    for index in measured:
        if (second := int(starts[index] - start)) < len(per_second):
            per_second[second] += 1
    delays = [starts[index] - starts[index - limit] - RATE_WINDOW_GUARD for index in measured if index >= limit]
    record(
        f"rate limit {limit:,}/s over {seconds:.0f}s ({processes}x8 workers): starts/s / limit",
        f"{rate:,.0f} starts/s; at most {busiest:,} in any second, at least {min(per_second):,} in a whole second; "
        f"a start replaced {1000 * statistics.median(delays):.0f} ms (median), "
        f"{1000 * statistics.fmean(delays):.0f} ms (mean) after its window",
        f"{rate / limit:.3f}",
        ">= 0.95, busiest <= limit",
    )


def main(runs: int, processes: int, seconds: float) -> None:
    print(f"flow control and pauses, {processes}x8 workers", flush=True)
    keys_limited_to_one(runs, 1000, processes)
    held_runs_do_not_slow_the_claim(runs, 100_000, processes)
    paused_runs_do_not_slow_the_claim(runs, 100_000, processes)
    rate_limit_is_met(1000, seconds, processes)
