"""Run every benchmark against one PostgreSQL server, print a table of ratios and write it for the docs.

Usage: ``python bench/run_all.py [--only store,e2e,peers,sleep,purge,flow,obs,fanout,scale,connections,bulk]
[--runs 5000] ...``, or ``python bench/run_all.py --big [--big-runs 10000000] [--sustained-minutes 10]`` for
the big tables and the sustained load
(an embedded pgserver in a temporary directory when DATABASE_URL is unset).

A run of the default set (no ``--only``, no ``--big``) that finishes writes its table as Markdown to
``docs/benchmarks/latest.md``, the page the docs include, or to ``--output PATH``; ``--no-write`` prints
it only. A run of another set writes only when given ``--output PATH``, and that file's title says it is
partial and which option chose it: a quick ``--only`` run never replaces the docs' table by surprise. A run
that fails writes nothing. The file's header states the date, the commit, the versions measured (the
peers' read in their own interpreter), the CPUs and the 1-minute load average at the start, at the end
and at its highest, sampled every few seconds.
"""

from __future__ import annotations

import argparse
import datetime
import os
import shlex
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import common, report

DEFAULT_SET = "store,e2e,peers,sleep,purge,flow,obs,fanout,connections,bulk"
DOCS_TABLE = os.path.join(common.ROOT, "docs", "benchmarks", "latest.md")
LOAD_INTERVAL = 5.0  # seconds between samples of the load average


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--only", help=f"comma-separated benchmarks to run (default {DEFAULT_SET})")
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
        "--layouts",
        default="1x8,1x16,1x32,1x64,2x8,2x16",
        help="worker layouts to try, PROCESSESxCONCURRENCY, comma-separated",
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
    written = parser.add_mutually_exclusive_group()
    written.add_argument(
        "--output",
        metavar="PATH",
        help="write the results as Markdown to PATH (a run of the default set writes docs/benchmarks/latest.md "
        "without it; any other run writes only with it)",
    )
    written.add_argument("--no-write", action="store_true", help="print the table only, write no file")
    return parser


def main() -> None:
    parser = build_parser()
    args = parser.parse_args()
    sampler = report.LoadSampler(LOAD_INTERVAL)
    sampler.start()
    started = datetime.datetime.now(datetime.UTC)
    embedded = "DATABASE_URL" not in os.environ
    common.setup_django()
    print(f"server: {os.environ['DATABASE_URL'].split('@')[-1]}", flush=True)
    try:
        run(chosen(args), args)
    finally:
        load = sampler.stop()
        common.print_table()
    path = destination(args)
    if path is None:
        if not args.no_write:
            print("\nnot written: a run of other than the default set writes its table only with --output PATH")
        return
    facts = gather_facts(started, measured_command(parser, args), selection(args), embedded, load)
    report.write(path, report.markdown(facts, common.RESULTS))
    print(f"\nwritten: {path}", flush=True)


def chosen(args: argparse.Namespace) -> set[str]:
    """The benchmarks the options chose."""
    return {"big"} if args.big else set((args.only or DEFAULT_SET).split(","))


def selection(args: argparse.Namespace) -> str | None:
    """The option that chose other than the default set, as the report's title names it; None for the default set."""
    if chosen(args) == set(DEFAULT_SET.split(",")):
        return None
    return "--big" if args.big else f"--only {args.only}"


def destination(args: argparse.Namespace) -> str | None:
    """Where the report is written: --output, else the docs' page for the default set; None for no file."""
    if args.no_write:
        return None
    return args.output or (DOCS_TABLE if selection(args) is None else None)


def measured_command(parser: argparse.ArgumentParser, args: argparse.Namespace) -> str:
    """The command line of what was measured: every option that differs from its default, where to write left out."""
    options = []
    for name, value in vars(args).items():
        if name in ("output", "no_write") or value == parser.get_default(name):
            continue
        options += [f"--{name.replace('_', '-')}"] if value is True else [f"--{name.replace('_', '-')}", str(value)]
    return shlex.join(["python", "bench/run_all.py", *options])


def gather_facts(
    started: datetime.datetime, command: str, selection: str | None, embedded: bool, load: report.Load
) -> report.RunFacts:
    """The header's facts, read at the end of the run (the peers' versions from the peers' own venv)."""
    from bench import bench_e2e

    peers = {}
    if common.PEERS_MEASURED:
        distributions = ["Django", "psycopg"]
        for peer in sorted(common.PEERS_MEASURED):
            distributions += bench_e2e.PEER_DISTRIBUTIONS[peer]
        peers = report.interpreter_versions(bench_e2e.PEERS_PYTHON, distributions)
    with common.raw_connect() as conn:
        server = report.server_version(conn)
    return report.RunFacts(
        started=started,
        finished=datetime.datetime.now(datetime.UTC),
        command=command,
        selection=selection,
        commit=report.commit(common.ROOT),
        versions=report.local_versions(),
        server=f"{server} ({'embedded pgserver' if embedded else 'DATABASE_URL'})",
        peers=peers,
        peers_interpreter=os.path.relpath(bench_e2e.PEERS_VENV, common.ROOT),
        cpus=os.cpu_count(),
        load=load,
    )


def run(only: set[str], args: argparse.Namespace) -> None:
    """Each benchmark ``only`` names, in a fixed order."""
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


if __name__ == "__main__":
    main()
