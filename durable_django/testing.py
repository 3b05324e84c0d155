"""Helpers for testing durable workflows in a project's own test suite.

``run_until_idle()`` executes everything claimable in this process, so a
pytest-django test can enqueue a run and assert on its outcome without a
worker process. Tests never need to sleep: ``make_due()`` lets a run's
delay, retry backoff, sleep, wait timeout or lease run out now,
``pass_deadline()`` lets a run's deadline pass, ``advance_schedule()`` lets
time pass for a cron schedule, and ``claim()``
takes runs as a worker with given bounds would, to hold them in a test.
``ensure_database_url()`` starts an embedded PostgreSQL (the ``pgserver``
package) when ``DATABASE_URL`` is unset.
"""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from uuid import UUID

from .types import Run, Schedule


def ensure_database_url(data_dir: str | None = None, *, keep: bool = False) -> str:
    """Return ``DATABASE_URL``, starting an embedded PostgreSQL first if it is unset.

    Args:
        data_dir: where the embedded server keeps its data; a temporary
            directory (deleted at exit) when None.
        keep: leave the server's data in place at exit (for a demo's data dir).

    Returns:
        The URL, also exported in ``os.environ`` so subprocesses share the server.
    """
    url = os.environ.get("DATABASE_URL")
    if url:
        return url
    try:
        with _runtime_dir():
            from pgserver.postgres_server import get_server
    except ImportError as exc:  # pragma: no cover - depends on the interpreter
        raise RuntimeError(
            "DATABASE_URL is unset and the pgserver package is not installed "
            "(it has wheels for CPython 3.11 and 3.12): set DATABASE_URL to a PostgreSQL server."
        ) from exc
    if data_dir is None:
        data_dir = tempfile.mkdtemp(prefix="durable-pg-")
    else:
        os.makedirs(os.path.dirname(os.path.abspath(data_dir)), exist_ok=True)
    server = get_server(data_dir, cleanup_mode="stop" if keep else "delete")
    url = server.get_uri()
    os.environ["DATABASE_URL"] = url
    return url


@contextmanager
def _runtime_dir() -> Iterator[None]:
    """Name a runtime directory for pgserver while it is imported, when the session has none.

    pgserver keeps its lock file in platformdirs' user runtime directory, read
    when it is imported. Without ``XDG_RUNTIME_DIR`` (containers, CI, ``su``)
    platformdirs warns (``RuntimeDirWarning``) and falls back to
    ``runtime-<uid>`` in the temporary directory. This names such a directory
    there, private as the XDG spec asks, so nothing warns; one that is not ours
    is left alone, and then the warning is about a real problem.
    """
    if os.environ.get("XDG_RUNTIME_DIR") or os.name != "posix":
        yield
        return
    path = os.path.join(tempfile.gettempdir(), f"runtime-{os.geteuid()}")
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        info = os.lstat(path)
        ours = stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid()
        if ours:
            os.chmod(path, 0o700)  # as platformdirs repairs its fallback (older releases made it 0755)
    except OSError:
        ours = False
    if not ours:
        yield
        return
    os.environ["XDG_RUNTIME_DIR"] = path
    try:
        yield
    finally:
        del os.environ["XDG_RUNTIME_DIR"]


def run_until_idle(
    *,
    functions: list[str] | None = None,
    queues: list[str] | None = None,
    tenant_id: str | None = None,
    max_runs: int = 10_000,
) -> int:
    """Execute every run that is claimable now, in this thread, until none is left.

    Runs that sleep or wait into the future are left waiting; call again after
    their deadline (or after emitting their signal) to continue them. Like a
    worker, it first fails the live runs whose deadline has passed (any run,
    whatever the filters). Attempt timeouts are not enforced here: the handler
    runs in the caller's thread, which nothing may abandon. From an async
    test, ``await sync_to_async(run_until_idle)()`` (thread-sensitive, the
    default, or not): an async handler's thread-sensitive calls, its ORM's
    included, are served in the thread that runs this.

    Args:
        functions: only these function names (default: every registered one).
        queues: only these queues (default: all).
        tenant_id: only this tenant's runs (default: all).
        max_runs: a safety bound on the number of attempts executed.

    Returns:
        The number of attempts executed.
    """
    from .worker.inline import drain

    return drain(functions=functions, queues=queues, tenant_id=tenant_id, max_runs=max_runs)


def make_due(run_id: str | UUID) -> Run:
    """Let a run's clock run out now, as if its time had passed.

    A pending run's delay or retry backoff ends; a waiting run's sleep or wait
    timeout (the deadline it journalled too) is reached; a running run's lease
    expires, as if its worker had died. Nothing else about the run changes.

    Raises:
        RunNotFound: there is no such run.
    """
    from .api.runs import run_id_of
    from .exceptions import RunNotFound
    from .store import time_travel

    run = time_travel.make_due(run_id_of(run_id))
    if run is None:
        raise RunNotFound(f"no run {run_id}", run_id=str(run_id))
    return run


def pass_deadline(run_id: str | UUID) -> Run:
    """Let a run's deadline pass now (only its own: its children keep theirs).

    The next worker pass (or ``run_until_idle()``) fails it with DeadlineExceeded.

    Raises:
        RunNotFound: there is no such run.
        InvalidInput: the run has no deadline.
    """
    from .api.runs import run_id_of
    from .exceptions import InvalidInput, RunNotFound
    from .store import time_travel

    run = time_travel.pass_deadline(run_id_of(run_id))
    if run is None:
        from .store import runs

        if runs.get_run(run_id_of(run_id)) is None:
            raise RunNotFound(f"no run {run_id}", run_id=str(run_id))
        raise InvalidInput(f"run {run_id} has no deadline", run_id=str(run_id))
    return run


def advance_schedule(schedule_id: str, by: timedelta | float, *, tenant_id: str | UUID | None = None) -> Schedule:
    """Let ``by`` pass for a cron schedule: its next tick comes that much sooner.

    Ticks that fall in the past are owed, as after a scheduler's downtime: the
    next scheduler pass fires once for them and moves on (docs/schedules.md).

    Raises:
        InvalidInput: there is no such schedule in this tenant's namespace.
    """
    from .engine.schedules import stored_id
    from .exceptions import InvalidInput
    from .storable import seconds
    from .store import time_travel

    advanced = time_travel.advance_schedule(stored_id(schedule_id, tenant_id), seconds(by, what="by", allow_none=False))
    if advanced is None:
        raise InvalidInput(f"no schedule {schedule_id!r}", schedule_id=schedule_id)
    return advanced


def claim(
    *,
    limit: int = 10,
    functions: list[str] | None = None,
    queues: list[str] | None = None,
    tenant_id: str | None = None,
    lease_seconds: float = 30.0,
    worker_id: str = "test-worker",
    started: int | None = None,
) -> list[Run]:
    """Claim runs as a worker with these bounds would, and hold them (no handler runs).

    Args:
        limit: at most this many runs.
        functions, queues, tenant_id: the worker's bounds (None: all).
        lease_seconds: the lease the claim takes.
        worker_id: the id the runs record as their holder.
        started: how many of them start at once, as for idle slots (None: all); the others are held
            claimed but not started, as a worker holds runs ahead of its slots.

    Returns:
        The claimed runs, as the claim left them (``attempts`` is each one's fence token).
    """
    from .engine import lifecycle

    bounds = lifecycle.claim_bounds(functions=functions, queues=queues, tenant_id=tenant_id)
    claimed = lifecycle.claim(
        limit=limit,
        start_now=limit if started is None else started,
        worker_id=worker_id,
        bounds=bounds,
        lease_seconds=lease_seconds,
    )
    return [attempt.run for attempt in claimed]
