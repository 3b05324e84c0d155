"""Run every benchmark against one PostgreSQL server and print a table of ratios.

Usage: ``python bench/run_all.py [--only store,e2e,peers,sleep,purge,flow,obs,fanout,scale,connections,bulk]
[--runs 5000] ...``, or ``python bench/run_all.py --big [--big-runs 10000000] [--sustained-minutes 10]`` for
the big tables and the sustained load
(an embedded pgserver in a temporary directory when DATABASE_URL is unset).
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import common


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--only",
        default="store,e2e,peers,sleep,purge,flow,obs,fanout,connections,bulk",
        help="comma-separated benchmarks to run",
    )
    parser.add_argument("--store-runs", type=int, default=3000, help="runs for the store vs raw benchmark")
    parser.add_argument("--runs", type=int, default=5000, help="no-op runs for the end-to-end benchmarks")
    parser.add_argument("--peer-rounds", type=int, default=3, help="rounds alternating durable_worker and the peers")
    parser.add_argument("--step-runs", type=int, default=50, help="runs of 100 steps (each round)")
    parser.add_argument("--latency-tries", type=int, default=50)
    parser.add_argument("--sleepers", type=int, default=10000)
    parser.add_argument("--sleep-seconds", type=float, default=20.0)
    parser.add_argument("--purge-runs", type=int, default=1_000_000, help="finished runs (3 steps each) to purge")
    parser.add_argument("--flow-runs", type=int, default=20_000, help="runs per side of the flow-control benchmarks")
    parser.add_argument("--flow-processes", type=int, default=2, help="worker processes (x8) of the flow benchmarks")
    parser.add_argument("--rate-seconds", type=float, default=60.0, help="how long the rate limit is measured")
    parser.add_argument("--fanout-runs", type=int, default=10_000, help="children, and runs per batch, of fanout")
    parser.add_argument("--bulk-runs", type=int, default=100_000, help="matching runs of the set-based bulk cancel")
    parser.add_argument(
        "--bulk-baseline-runs", type=int, default=10_000, help="matching runs of the run-by-run bulk cancel"
    )
    parser.add_argument("--scale-runs", type=int, default=5000, help="runs per round of the scale benchmark")
    parser.add_argument(
        "--scale-processes", default="1,2,4", help="worker process counts (x8 threads) of the scale benchmark"
    )
    parser.add_argument(
        "--layouts", default="1x8,1x16,2x8", help="worker layouts to try, PROCESSESxCONCURRENCY, comma-separated"
    )
    parser.add_argument(
        "--big", action="store_true", help="only the big tables vs small, then the sustained load (bloat)"
    )
    parser.add_argument("--big-runs", type=int, default=10_000_000, help="finished runs (3 steps each) of --big")
    parser.add_argument("--big-pending", type=int, default=1_000_000, help="pending runs of --big")
    parser.add_argument("--big-purge", type=int, default=100_000, help="oldest finished runs --big purges")
    parser.add_argument(
        "--sustained-minutes", type=float, default=10.0, help="length of the sustained-load benchmark (0: skip it)"
    )
    parser.add_argument(
        "--bloat-runs", type=int, default=1_000_000, help="finished runs under --only bloat's sustained load"
    )
    parser.add_argument(
        "--migrate-rounds", type=int, default=6, help="rounds of --only migrations (two fresh databases each)"
    )
    args = parser.parse_args()
    only = {"big"} if args.big else set(args.only.split(","))
    common.setup_django()
    print(f"server: {os.environ['DATABASE_URL'].split('@')[-1]}", flush=True)
    try:
        if "store" in only:
            from bench import bench_store

            bench_store.main(args.store_runs)
        if "e2e" in only:
            from bench import bench_e2e

            bench_e2e.main(args)
        if "peers" in only:
            from bench import bench_e2e

            bench_e2e.peers_main(args)
        if "sleep" in only:
            from bench import bench_sleepers

            bench_sleepers.main(args.sleepers, args.sleep_seconds)
        if "purge" in only:
            from bench import bench_purge

            bench_purge.main(args.purge_runs, steps=3, batch_size=1000, baseline_seconds=10.0)
        if "flow" in only:
            from bench import bench_flow

            bench_flow.main(args.flow_runs, args.flow_processes, args.rate_seconds)
        if "scale" in only:
            from bench import bench_scale

            bench_scale.main(args.scale_runs, [int(count) for count in args.scale_processes.split(",")])
        if "obs" in only:
            from bench import bench_observability

            bench_observability.main(args.runs)
        if "fanout" in only:
            from bench import bench_fanout

            bench_fanout.main(args.fanout_runs, args.flow_processes)
        if "bulk" in only:
            from bench import bench_bulk

            bench_bulk.main(args.bulk_runs, args.bulk_baseline_runs)
        if "connections" in only:
            from bench import bench_connections

            bench_connections.main()
        if "big" in only:
            from bench import bench_big

            bench_big.main(args.big_runs, args.big_pending, args.big_purge, args.sustained_minutes)
        if "bloat" in only:
            from bench import bench_bloat

            bench_bloat.main(args.sustained_minutes, args.bloat_runs)
        if "migrations" in only:
            from bench import bench_migrations

            bench_migrations.main(args.migrate_rounds)
    finally:
        common.print_table()


if __name__ == "__main__":
    main()
