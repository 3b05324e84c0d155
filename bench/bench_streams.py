"""Streams: a body write against a raw INSERT, write-to-reader latency, many async readers on few connections."""

from __future__ import annotations

import asyncio
import os
import statistics
import threading
import time

from . import common
from .common import raw_connect, record, reset_tables

# Eight rounds of 500 writes a side: rounds of 200 (a tenth of a second) left a run's ratio at the mercy of
# the machine (0.59 to 0.88 in five runs of the same code).
WRITES = 4000
LATENCY_SAMPLES = 200


def held_context():
    """A context on a claimed run of bench.noop, as a worker's handler would have it."""
    from durable_django import api
    from durable_django.engine import lifecycle
    from durable_django.engine.context import Context

    run = api.enqueue("bench.noop")
    bounds = lifecycle.claim_bounds(functions=["bench.noop"], queues=None, tenant_id=None)
    [attempt] = lifecycle.claim(limit=1, start_now=1, worker_id="bench-streams", bounds=bounds)
    return run.run_id, Context(attempt)


def write_ratio(rounds: int = 8) -> None:
    """Rounds of each, alternating, so the shared machine's load falls on both alike; the median rates."""
    run_id, ctx = held_context()
    ours_rates, raw_rates = [], []
    with raw_connect() as conn:
        conn.execute("DROP TABLE IF EXISTS bench_raw_item")
        conn.execute("CREATE TABLE bench_raw_item (LIKE durable_stream_item INCLUDING ALL)")
        for round_number in range(rounds):
            began = time.perf_counter()
            for n in range(WRITES // rounds):
                ctx.write_stream("bench", {"token": f"word-{n}"})
            ours_rates.append(WRITES // rounds / (time.perf_counter() - began))
            began = time.perf_counter()
            for n in range(WRITES // rounds):
                conn.execute(
                    "INSERT INTO bench_raw_item (run_id, key, item_offset, value, attempt, written_at, tenant_id) "
                    "VALUES (%s, 'bench', %s, %s::jsonb, 1, now(), NULL)",
                    [run_id, round_number * WRITES + n, f'{{"token":"word-{n}"}}'],
                )
            raw_rates.append(WRITES // rounds / (time.perf_counter() - began))
    ours, raw = statistics.median(ours_rates), statistics.median(raw_rates)
    record("body write_stream vs raw INSERT", f"{ours:,.0f}/s vs {raw:,.0f}/s", f"{ours / raw:.2f}", ">= 0.7")


def latency() -> None:
    from durable_django import read_stream

    run_id, ctx = held_context()
    delays: list[float] = []

    def read() -> None:
        for item in read_stream(run_id, "latency", timeout=120):
            delays.append(time.perf_counter() - item.value)

    reader = threading.Thread(target=read)
    reader.start()
    time.sleep(0.5)
    for _ in range(LATENCY_SAMPLES):
        ctx.write_stream("latency", time.perf_counter())
        time.sleep(0.01)
    ctx.close_stream("latency")
    reader.join()
    delays.sort()
    p50, p95 = statistics.median(delays), delays[int(len(delays) * 0.95)]
    record("write-to-reader latency", f"p50 {p50 * 1000:.1f} ms, p95 {p95 * 1000:.1f} ms", "", "p50 < 10 ms")


def connections() -> int:
    with raw_connect() as conn:
        [(count,)] = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()")
        return int(count) - 1


def many_readers(readers: int) -> None:
    from durable_django import aread_stream

    run_id, ctx = held_context()
    before, rss_before = connections(), common.rss_mb(os.getpid())
    seen: dict[str, float] = {}

    async def read(counts: list[int]) -> None:
        async for _ in aread_stream(run_id, "fan", timeout=300):
            counts.append(1)

    async def main() -> None:
        counts: list[int] = []
        tasks = [asyncio.create_task(read(counts)) for _ in range(readers)]
        await asyncio.sleep(3)
        seen["connections"] = await asyncio.to_thread(connections)
        seen["rss"] = common.rss_mb(os.getpid())
        began = time.perf_counter()
        await asyncio.to_thread(ctx.write_stream, "fan", "hello")
        while len(counts) < readers:
            await asyncio.sleep(0.005)
        seen["all read"] = time.perf_counter() - began
        await asyncio.to_thread(ctx.close_stream, "fan")
        await asyncio.gather(*tasks)

    asyncio.run(main())
    record(
        f"{readers} async readers of one stream",
        f"{seen['connections'] - before:.0f} more connections, RSS +{seen['rss'] - rss_before:.0f} MB, "
        f"one write reached all in {seen['all read'] * 1000:.0f} ms",
        "",
        "bounded connections",
    )


if __name__ == "__main__":
    common.setup_django()
    reset_tables()
    write_ratio()
    latency()
    many_readers(int(os.environ.get("BENCH_STREAM_READERS", "1000")))
    common.print_table()
    from durable_django.api import wakeups

    wakeups.close()
