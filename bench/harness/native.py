"""Run hardbyte/postgresql-job-queue-benchmarking without docker, against a local PostgreSQL, beside durable-django.

The harness drives PostgreSQL with ``docker compose`` and launches its adapters with ``docker run``. This
script imports the harness from a checkout of it (none of its code lives here) and replaces, at run time,
only those two edges: PostgreSQL is a fresh ``initdb`` cluster in a temporary directory, configured by
``include``-ing the checkout's own ``postgres.conf`` (then bound to the loopback), started and stopped with
``pg_ctl`` (``-m fast``, the signal the postgres image stops with); the adapters run as local processes:
durable-django's from ``bench/harness/adapter.py``, procrastinate's own ``procrastinate-bench/main.py``
from the checkout. Everything else (phases, chaos and pressure hooks, the metrics daemon, pgstattuple
snapshots, summary.json) is the harness's.

Get the harness (MIT) outside this repository, and a Python with its and procrastinate's dependencies:

    git clone https://github.com/hardbyte/postgresql-job-queue-benchmarking ../pg-queue-harness
    python3 -m venv ../harness-venv
    ../harness-venv/bin/pip install "psycopg[binary]==3.3.3" "procrastinate==3.8.1" matplotlib pandas numpy pydantic

PostgreSQL must provide pgstattuple (the harness requires it): on Debian, ``apt-get install postgresql
postgresql-contrib``; pgserver's embedded build does not ship it. Then, from this repository's root:

    ../harness-venv/bin/python bench/harness/native.py --harness ../pg-queue-harness \\
        --adapter-python .venv/bin/python --out ../harness-results sweep
    ../harness-venv/bin/python bench/harness/native.py --out ../harness-results report

``run`` passes its arguments to the harness's own ``bench run`` (``--systems durable-django,...``);
``sweep`` runs the shortened plan of clean, chaos and pressure cells (bench/harness/plan.py), each system
in a harness run of its own under a timeout; ``report`` prints its tables. BENCH_HARNESS_DIR and
BENCH_PG_BIN may stand for ``--harness`` and ``--pg-bin``.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
PORT = 15555  # the harness's pg_url() is fixed to it


def find_pg_bin() -> str:
    """A PostgreSQL whose contrib has pgstattuple, newest first."""
    for bin_dir in sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(Path(p).parent.name), reverse=True):
        lib = Path(bin_dir).parent / "lib"
        if (lib / "pgstattuple.so").exists():
            return bin_dir
    raise SystemExit("no PostgreSQL with pgstattuple found: install postgresql-contrib or pass --pg-bin")


class NativePostgres:
    """The harness's compose service, as a cluster in a directory: fresh on start, like ``down -v`` then ``up``."""

    def __init__(self, pg_bin: str, harness: Path, base: Path, audit_file: Path | None) -> None:
        self.pg_bin = pg_bin
        self.harness = harness
        self.data = base / "data"
        self.log = base / "postgres.log"
        self.audit_file = audit_file
        self.run_dir: Path | None = None

    def pg(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        command = [os.path.join(self.pg_bin, args[0]), *args[1:]]
        if os.geteuid() == 0:  # PostgreSQL refuses to run as root: as the packages' postgres user
            command = ["runuser", "-u", "postgres", "--", *command]
        return subprocess.run(command, check=check, capture_output=True)

    def running(self) -> bool:
        return self.data.exists() and self.pg("pg_ctl", "-D", str(self.data), "status", check=False).returncode == 0

    def fresh(self, _image: str = "") -> None:
        if self.running():
            self.stop()
        shutil.rmtree(self.data, ignore_errors=True)
        if os.geteuid() == 0:
            shutil.chown(self.data.parent, "postgres")
        self.pg("initdb", "-D", str(self.data), "-U", "bench", "--auth=trust", "-E", "UTF8", "--locale=C.UTF-8")
        with open(self.data / "postgresql.conf", "a") as conf:
            conf.write(f"\ninclude '{self.harness / 'postgres.conf'}'\n")
            # After the include: the port the harness expects, on the loopback only, sockets in the cluster.
            conf.write(f"port = {PORT}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{self.data}'\n")
        self.start()

    def start(self, _image: str = "") -> None:
        self.pg("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "-t", "60", "start")
        self.wait_ready()

    def wait_ready(self) -> None:
        import psycopg
        from bench_harness.adapters import pg_url

        for _ in range(60):
            try:
                with psycopg.connect(pg_url("postgres"), autocommit=True, connect_timeout=3) as conn:
                    conn.execute("SELECT 1")
                return
            except psycopg.Error:
                time.sleep(1)
        raise RuntimeError("PostgreSQL did not become query-ready")

    def stop(self, _image: str = "") -> None:
        if self.running():
            self.audit()
            self.pg("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop", check=False)

    def stop_for_chaos(self, _image: str = "") -> None:
        self.pg("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop", check=False)

    def restart(self, image: str = "") -> None:
        self.stop_for_chaos(image)
        self.start(image)

    def audit(self) -> None:
        """Before the cluster stops: where every job of each system stands, and the disk its tables take."""
        if self.audit_file is None:
            return
        import psycopg
        from bench_harness.adapters import ADAPTERS, AdapterManifest, pg_url

        for system, entry in ADAPTERS.items():
            try:
                manifest = AdapterManifest.load(entry.bench_dir)
            except OSError:
                continue
            try:
                with psycopg.connect(pg_url(manifest.db_name), autocommit=True, connect_timeout=3) as conn:
                    record = audit_database(conn, system, manifest.event_tables)
            except psycopg.Error:
                continue
            if record is None:
                continue
            record["run_dir"] = self.run_dir.name if self.run_dir else None
            with open(self.audit_file, "a") as out:
                out.write(json.dumps(record) + "\n")


AUDIT_SQL = {
    "durable-django": (
        "SELECT status || CASE WHEN status = 'running' AND leased_until < now() THEN '_lease_expired' ELSE '' END,"
        " count(*) FROM durable_run GROUP BY 1"
    ),
    "procrastinate": "SELECT status::text, count(*) FROM procrastinate_jobs GROUP BY 1",
}


def audit_database(conn, system: str, tables: list[str]) -> dict | None:
    sql = AUDIT_SQL.get(system)
    if sql is None:
        return None
    try:
        states = dict(conn.execute(sql).fetchall())
    except Exception:  # noqa: BLE001 - the table is not there: this system did not run in this cluster
        return None
    sizes = {}
    for table in tables:
        row = conn.execute("SELECT pg_total_relation_size(to_regclass(%s))", (table,)).fetchone()
        sizes[table] = int(row[0] or 0)
    return {"system": system, "states": states, "jobs": sum(states.values()), "table_bytes": sizes}


def install(harness: Path, pg: NativePostgres, adapter_python: str, out: Path | None) -> None:
    """Point the imported harness at the native PostgreSQL and the local adapter processes."""
    sys.path.insert(0, str(harness))
    from bench_harness import adapters, orchestrator

    orchestrator.start_postgres = pg.fresh
    orchestrator.stop_postgres = pg.stop
    orchestrator._compose_stop_postgres = pg.stop_for_chaos
    orchestrator._compose_start_postgres = pg.start
    orchestrator._restart_postgres = pg.restart
    if out is not None:
        orchestrator.RESULTS_ROOT = out
        new_run_dir = orchestrator._new_run_dir

        def remember_run_dir(scenario):
            pg.run_dir = new_run_dir(scenario)
            return pg.run_dir

        orchestrator._new_run_dir = remember_run_dir

    def no_build(_skip: bool) -> None:
        return None

    def launch_durable(manifest, overrides):
        env = adapters._base_env(manifest, overrides)
        env["PYTHONPATH"] = str(ROOT)
        return adapters.LaunchSpec(argv=[adapter_python, "-m", "bench.harness.adapter"], env=env, cwd=str(ROOT))

    def launch_procrastinate(manifest, overrides):
        script = harness / "procrastinate-bench" / "main.py"
        return adapters.LaunchSpec(argv=[sys.executable, str(script)], env=adapters._base_env(manifest, overrides))

    adapters.ADAPTERS["durable-django"] = adapters.AdapterEntry(
        bench_dir=HERE, builder=no_build, launcher=launch_durable
    )
    adapters.ADAPTERS["procrastinate"] = adapters.AdapterEntry(
        bench_dir=harness / "procrastinate-bench", builder=no_build, launcher=launch_procrastinate
    )


def command_run(args: argparse.Namespace, rest: list[str]) -> int:
    harness = Path(args.harness).resolve()
    out = Path(args.out).resolve() if args.out else None
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    base = Path(os.environ.get("HARNESS_PG_BASE") or tempfile.mkdtemp(prefix="harness-pg-"))
    audit_file = out / "audits.jsonl" if out is not None else None
    pg = NativePostgres(args.pg_bin or find_pg_bin(), harness, base, audit_file)
    install(harness, pg, args.adapter_python, out)
    from bench_harness import orchestrator

    def on_term(*_):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    try:
        return orchestrator.main(["run", *rest])
    finally:
        pg.stop_for_chaos()
        shutil.rmtree(base, ignore_errors=True)


def command_sweep(args: argparse.Namespace) -> int:
    from bench.harness import plan

    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    return plan.sweep(args, out)


def command_report(args: argparse.Namespace) -> int:
    from bench.harness import report

    print(report.render(Path(args.out).resolve()))
    return 0


def main() -> int:
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--harness", default=os.environ.get("BENCH_HARNESS_DIR"), help="a checkout of the harness")
    parser.add_argument("--pg-bin", default=os.environ.get("BENCH_PG_BIN"), help="PostgreSQL's bin directory")
    parser.add_argument("--adapter-python", default=sys.executable, help="a Python with this project's dependencies")
    parser.add_argument("--out", help="results directory (run, sweep, report)")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("run", help="the harness's `bench run`, natively; its arguments follow")
    sweep = sub.add_parser("sweep", help="the shortened clean, chaos and pressure plan")
    sweep.add_argument("--systems", default="durable-django,procrastinate")
    sweep.add_argument("--only", help="comma-separated cell groups: clean, chaos, pressure, long")
    sweep.add_argument("--cells", help="comma-separated cell names (plan.py's), to run again")
    sub.add_parser("report", help="the tables of a sweep's results")
    args, rest = parser.parse_known_args()
    if args.command != "report" and not args.harness:
        parser.error("--harness (or BENCH_HARNESS_DIR) is required")
    if args.command == "run":
        return command_run(args, rest)
    if args.command == "sweep":
        return command_sweep(args)
    return command_report(args)


if __name__ == "__main__":
    raise SystemExit(main())
