"""Helpers shared by the test tiers."""

import os
import re
import socket
import threading
import time
from urllib.parse import quote

import psycopg
from django.db import connection, connections

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def subprocess_database_url(alias: str = "default") -> str:
    """A DATABASE_URL naming the test database pytest-django created, as ``alias`` reaches it, for subprocesses."""
    settings = connections[alias].settings_dict
    user = quote(settings["USER"] or "", safe="")
    password = quote(settings["PASSWORD"] or "", safe="")
    auth = f"{user}:{password}@" if password else (f"{user}@" if user else "")
    port = f":{settings['PORT']}" if settings["PORT"] else ""
    url = f"postgres://{auth}{settings['HOST'] or ''}{port}/{settings['NAME']}"
    socket_host = settings["OPTIONS"].get("host")
    return f"{url}?host={socket_host}" if socket_host else url


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_until(predicate, timeout: float = 30.0, interval: float = 0.02, message: str = "condition"):
    """Poll ``predicate`` until it is truthy; fail the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {message}")


def statuses_on(url: str, run_ids) -> dict[str, str]:
    """Run id -> status on another server (a test's own), without a Django process to start; {} while it is down."""
    try:
        with psycopg.connect(url, connect_timeout=5) as conn:
            rows = conn.execute(
                "SELECT run_id, status FROM durable_run WHERE run_id = ANY(%s)", [list(run_ids)]
            ).fetchall()
    except psycopg.OperationalError:
        return {}
    return dict(rows)


def run_in_threads(count: int, target, *args):
    """Start ``count`` threads on ``target`` together; return their results (or raise the first error)."""
    barrier = threading.Barrier(count)
    results: list = [None] * count
    errors: list = []

    def body(index):
        try:
            barrier.wait()
            results[index] = target(index, *args)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=body, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return results


# Advisory locks held in this test database: other test processes share the server, each with a database of its own.
ADVISORY_LOCKS_HERE = (
    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' "
    "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
)


def sql(query: str, params=None):
    with connection.cursor() as cur:
        cur.execute(query, params or [])
        return cur.fetchall() if cur.description else None


def other_sessions() -> set[int]:
    """The server processes of the other sessions on this test database (this process's, and any other's)."""
    rows = sql("SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()")
    return {pid for (pid,) in rows}


# A line the warnings module prints ("file.py:12: SomeWarning: ...") or a log record at WARNING or worse.
_WARNING_LINE = re.compile(r"\w+Warning: |\b(WARNING|ERROR|CRITICAL)\b")
# runserver's own notice, which Django prints to whoever runs it.
_DEVELOPMENT_SERVER_NOTICE = "WARNING: This is a development server."


def warning_lines(output: str) -> list[str]:
    """The lines of a command's output that warn about something (a newcomer would take them for trouble)."""
    return [
        line
        for line in output.splitlines()
        if _WARNING_LINE.search(line) and not line.startswith(_DEVELOPMENT_SERVER_NOTICE)
    ]
