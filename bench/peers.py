"""Drain N jobs with a peer's own workers in one layout; prints one JSON line {rate, layout}.

Runs in the peers' venv (``bench/.peers-venv``), never the package's:
``python -m bench.peers PEER LAYOUT N`` with PEER_DATABASE_URL naming the peer's own database
on the benchmark server. Each peer runs as its docs recommend for throughput:

- django-tasks-db: LAYOUT is the number of ``db_worker`` processes; persistent connections
  (``CONN_MAX_AGE = None`` in ``peer_settings.py``), warnings only (``-v 0``).
- procrastinate: LAYOUT is PROCESSESxCONCURRENCY; a pool of concurrency + 1 connections per
  worker, LISTEN/NOTIFY on (its default).
- dbos: LAYOUT is the number of worker processes; a workflow of three steps on a queue
  laid out as ``peer_dbos.py`` says.

``python -m bench.peers dbos-worker`` is one DBOS worker process (started by the dbos drain).
"""

from __future__ import annotations

import json
import os
import sys

os.environ["DATABASE_URL"] = os.environ["PEER_DATABASE_URL"]

from bench import common


def counter(sql: str):
    def count() -> int:
        with common.raw_connect() as conn:
            return conn.execute(sql).fetchone()[0]

    return count


def table_exists(name: str) -> bool:
    with common.raw_connect() as conn:
        return conn.execute("SELECT to_regclass(%s) IS NOT NULL", [name]).fetchone()[0]


def drain(count, n: int, command: list[str], processes: int, env: dict | None = None) -> float:
    workers = [common.spawn(command, env) for _ in range(processes)]
    try:
        return common.rate_while_draining(count, n, workers, timeout=300)
    finally:
        common.stop(workers)


def django_tasks_db(layout: str, n: int) -> float:
    os.environ["DJANGO_SETTINGS_MODULE"] = "bench.peer_settings"
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)
    from bench.peer_tasks import django_noop

    with common.raw_connect() as conn:
        conn.execute("TRUNCATE django_tasks_database_dbtaskresult")
    for _ in range(n):
        django_noop.enqueue()
    # --batch exits at the first empty claim, so the idle --interval never applies.
    command = [sys.executable, "-m", "django", "db_worker", "--batch", "--no-startup-delay", "-v", "0"]
    return drain(
        counter("SELECT count(*) FROM django_tasks_database_dbtaskresult WHERE status = 'SUCCESSFUL'"),
        n,
        command,
        int(layout),
        {"DJANGO_SETTINGS_MODULE": "bench.peer_settings"},
    )


def procrastinate(layout: str, n: int) -> float:
    processes, concurrency = map(int, layout.split("x"))
    os.environ["PROCRASTINATE_POOL_SIZE"] = str(concurrency + 1)
    from bench.peer_tasks import app, procrastinate_noop

    # Warnings only, as for every system measured (durable_worker runs with -v 0).
    app_path = ["-m", "procrastinate", "--app=bench.peer_tasks.app", "--log-level", "warning"]
    if not table_exists("procrastinate_jobs"):
        common.spawn([sys.executable, *app_path, "schema", "--apply"]).wait()
    with common.raw_connect() as conn:
        conn.execute("TRUNCATE procrastinate_jobs CASCADE")
    with app.open():
        for start in range(0, n, 1000):
            procrastinate_noop.batch_defer(*[{} for _ in range(min(1000, n - start))])
    command = [sys.executable, *app_path, "worker", "--concurrency", str(concurrency), "--one-shot"]
    return drain(counter("SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'"), n, command, processes)


def dbos(layout: str, n: int) -> float:
    from bench import peer_dbos

    peer_dbos.bootstrap()
    with common.raw_connect() as conn:
        # A step's output and a workflow's input and output have no foreign key to cascade from.
        conn.execute(
            "TRUNCATE dbos.workflow_status, dbos.operation_outputs, dbos.workflow_input, dbos.workflow_output CASCADE"
        )
    peer_dbos.enqueue(n)
    rate = drain(
        counter("SELECT count(*) FROM dbos.workflow_status WHERE status = 'SUCCESS'"),
        n,
        [sys.executable, "-m", "bench.peers", "dbos-worker"],
        int(layout),
    )
    with common.raw_connect() as conn:
        steps = conn.execute("SELECT count(*) FROM dbos.operation_outputs").fetchone()[0]
    if steps != 3 * n:
        raise RuntimeError(f"{steps} steps journalled, expected {3 * n}")
    return rate


PEERS = {"django-tasks-db": django_tasks_db, "procrastinate": procrastinate, "dbos": dbos}

if __name__ == "__main__":
    if sys.argv[1] == "dbos-worker":
        from bench import peer_dbos

        peer_dbos.work()
    else:
        peer, layout, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
        print(json.dumps({"rate": PEERS[peer](layout, count), "layout": layout}), flush=True)
