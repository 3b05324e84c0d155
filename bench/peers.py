"""Drain no-op jobs with a peer's own worker; prints one JSON line {rate, layout}.

Runs in the peers' venv (``bench/.peers-venv``), never the package's: ``python -m bench.peers PEER N``
with PEER_DATABASE_URL naming an empty database on the benchmark server.
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


def django_tasks_db(n: int) -> dict:
    os.environ["DJANGO_SETTINGS_MODULE"] = "bench.peer_settings"
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)
    from bench.peer_tasks import django_noop

    best = (0.0, "")
    for processes in (4, 2):
        with common.raw_connect() as conn:
            conn.execute("TRUNCATE django_tasks_database_dbtaskresult")
        for _ in range(n):
            django_noop.enqueue()
        command = [sys.executable, "-m", "django", "db_worker", "--batch", "--no-startup-delay", "--interval", "0.1"]
        workers = [common.spawn(command, {"DJANGO_SETTINGS_MODULE": "bench.peer_settings"}) for _ in range(processes)]
        try:
            rate = common.rate_while_draining(
                counter("SELECT count(*) FROM django_tasks_database_dbtaskresult WHERE status = 'SUCCESSFUL'"),
                n,
                workers,
                timeout=120,
            )
        finally:
            common.stop(workers)
        best = max(best, (rate, f"{processes} proc db_worker"))
    return {"rate": best[0], "layout": best[1]}


def procrastinate(n: int) -> dict:
    from bench.peer_tasks import app, procrastinate_noop

    # Warnings only, as for every system measured (durable_worker runs with -v 0).
    app_path = ["-m", "procrastinate", "--app=bench.peer_tasks.app", "--log-level", "warning"]
    common.spawn([sys.executable, *app_path, "schema", "--apply"]).wait()
    best = (0.0, "")
    for processes, concurrency in ((1, 8), (4, 2)):
        with common.raw_connect() as conn:
            conn.execute("TRUNCATE procrastinate_jobs CASCADE")
        with app.open():
            for start in range(0, n, 1000):
                procrastinate_noop.batch_defer(*[{} for _ in range(min(1000, n - start))])
        command = [sys.executable, *app_path, "worker", "--concurrency", str(concurrency), "--one-shot"]
        workers = [common.spawn(command) for _ in range(processes)]
        try:
            rate = common.rate_while_draining(
                counter("SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'"), n, workers, timeout=120
            )
        finally:
            common.stop(workers)
        best = max(best, (rate, f"{processes} proc x {concurrency}"))
    return {"rate": best[0], "layout": best[1]}


if __name__ == "__main__":
    peer, count = sys.argv[1], int(sys.argv[2])
    result = {"django-tasks-db": django_tasks_db, "procrastinate": procrastinate}[peer](count)
    print(json.dumps(result), flush=True)
