"""Helpers for testing durable workflows in a project's own test suite.

``run_until_idle()`` executes everything claimable in this process, so a
pytest-django test can enqueue a run and assert on its outcome without a
worker process. ``ensure_database_url()`` starts an embedded PostgreSQL
(the ``pgserver`` package) when ``DATABASE_URL`` is unset.
"""

from __future__ import annotations

import os
import tempfile


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
        import pgserver
    except ImportError as exc:  # pragma: no cover - depends on the interpreter
        raise RuntimeError(
            "DATABASE_URL is unset and the pgserver package is not installed "
            "(it has wheels for CPython 3.11 and 3.12): set DATABASE_URL to a PostgreSQL server."
        ) from exc
    if data_dir is None:
        data_dir = tempfile.mkdtemp(prefix="durable-pg-")
    else:
        os.makedirs(os.path.dirname(os.path.abspath(data_dir)), exist_ok=True)
    server = pgserver.get_server(data_dir, cleanup_mode="stop" if keep else "delete")
    url = server.get_uri()
    os.environ["DATABASE_URL"] = url
    return url


def run_until_idle(*, functions=None, queues=None, tenant_id=None, max_runs: int = 10_000) -> int:
    """Execute every run that is claimable now, in this thread, until none is left.

    Runs that sleep or wait into the future are left waiting; call again after
    their deadline (or after emitting their signal) to continue them.

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
