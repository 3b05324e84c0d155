"""Run every benchmark against one PostgreSQL server and print a table of ratios.

Usage: ``python bench/run_all.py [--only store,e2e,peers,sleep,purge,flow,obs,fanout,scale,connections]
[--runs 5000] ...``
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
        default="store,e2e,peers,sleep,purge,flow,obs,fanout,connections",
        help="comma-separated benchmarks to run",
    )
    parser.add_argument("--store-runs", type=int, default=3000, help="runs for the store vs raw benchmark")
    parser.add_argument("--runs", type=int, default=5000, help="no-op runs for the end-to-end benchmarks")
    parser.add_argument("--step-runs", type=int, default=50, help="runs of 100 steps (each round)")
    parser.add_argument("--latency-tries", type=int, default=50)
    parser.add_argument("--sleepers", type=int, default=10000)
    parser.add_argument("--sleep-seconds", type=float, default=20.0)
    parser.add_argument("--purge-runs", type=int, default=1_000_000, help="finished runs (3 steps each) to purge")
    parser.add_argument("--flow-runs", type=int, default=20_000, help="runs per side of the flow-control benchmarks")
    parser.add_argument("--flow-processes", type=int, default=2, help="worker processes (x8) of the flow benchmarks")
    parser.add_argument("--rate-seconds", type=float, default=60.0, help="how long the rate limit is measured")
    parser.add_argument("--fanout-runs", type=int, default=10_000, help="children, and runs per batch, of fanout")
    parser.add_argument("--scale-runs", type=int, default=5000, help="runs per round of the scale benchmark")
    parser.add_argument(
        "--scale-processes", default="1,2,4", help="worker process counts (x8 threads) of the scale benchmark"
    )
    parser.add_argument(
        "--layouts", default="1x8,1x16,2x8", help="worker layouts to try, PROCESSESxCONCURRENCY, comma-separated"
    )
    args = parser.parse_args()
    only = set(args.only.split(","))
    common.setup_django()
    print(f"server: {os.environ['DATABASE_URL'].split('@')[-1]}", flush=True)
    try:
        if "store" in only:
            from bench import bench_store

            bench_store.main(args.store_runs)
        if "e2e" in only or "peers" in only:
            from bench import bench_e2e

            bench_e2e.main(args, with_durable="e2e" in only, with_peers="peers" in only)
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
        if "connections" in only:
            from bench import bench_connections

            bench_connections.main()
    finally:
        common.print_table()


if __name__ == "__main__":
    main()
