"""Statements on durable_worker: each worker process records itself, is seen with its heartbeat, and marks
its graceful stop; a killed one simply stops being seen.

The table holds one row per worker process started in the last day (older
rows are pruned whenever a worker starts), so every read here is small.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime

from .db import cursor

# Gone workers stay listed for a day (the admin shows "recently gone"); a starting worker prunes older rows.
KEEP_GONE = "1 day"

# Record a worker, or see it again: a heartbeat repeats what it is, so a row pruned or never written (the
# database was down at start) comes back. A worker marked stopped stays stopped (a last beat may come late).
SEEN = """
INSERT INTO durable_worker (worker_id, host, pid, queues, functions, tenant_id, concurrency, started_at, last_seen_at)
VALUES (%(worker_id)s, %(host)s, %(pid)s, %(queues)s::jsonb, %(functions)s::jsonb, %(tenant_id)s,
        %(concurrency)s, now(), now())
ON CONFLICT (worker_id) DO UPDATE SET last_seen_at = now() WHERE durable_worker.stopped_at IS NULL
"""

# A worker stopped gracefully.
STOPPED = "UPDATE durable_worker SET stopped_at = now(), last_seen_at = now() WHERE worker_id = %s"

# Workers gone for longer than the admin lists them.
PRUNE = f"DELETE FROM durable_worker WHERE coalesce(stopped_at, last_seen_at) < now() - interval '{KEEP_GONE}'"

# Workers seen within a window and not stopped, most recently seen first, and the database's clock.
LIVE = """
SELECT worker_id, host, pid, functions::text, last_seen_at, now() FROM durable_worker
WHERE stopped_at IS NULL AND last_seen_at >= now() - make_interval(secs => %(within)s::float8)
ORDER BY last_seen_at DESC
"""


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerIdentity:
    """What a worker records about itself."""

    worker_id: str
    host: str
    pid: int
    # None: every queue.
    queues: list[str] | None
    # name -> the versions it registers.
    functions: dict[str, list[int]]
    tenant_id: str | None
    concurrency: int


@dataclass(frozen=True, slots=True, kw_only=True)
class LiveWorker:
    """A worker seen recently, as the health check and the workers page read it."""

    worker_id: str
    host: str
    pid: int
    functions: dict[str, list[int]]
    last_seen_at: datetime
    # Seconds since it was last seen, by the database's clock.
    seen_ago: float


def seen(identity: WorkerIdentity) -> None:
    """Record the worker, or mark it seen now."""
    with cursor() as cur:
        cur.execute(
            SEEN,
            {
                "worker_id": identity.worker_id,
                "host": identity.host,
                "pid": identity.pid,
                "queues": None if identity.queues is None else json.dumps(identity.queues),
                "functions": json.dumps(identity.functions),
                "tenant_id": identity.tenant_id,
                "concurrency": identity.concurrency,
            },
        )


def stopped(worker_id: str) -> None:
    with cursor() as cur:
        cur.execute(STOPPED, [worker_id])


def prune() -> int:
    """Delete the rows of workers gone for more than a day; returns how many."""
    with cursor() as cur:
        cur.execute(PRUNE)
        pruned: int = cur.rowcount
        return pruned


def live(within_seconds: float) -> list[LiveWorker]:
    """Workers seen within ``within_seconds`` that did not stop, most recently seen first."""
    with cursor() as cur:
        cur.execute(LIVE, {"within": within_seconds})
        rows = cur.fetchall()
    return [
        LiveWorker(
            worker_id=worker_id,
            host=host,
            pid=pid,
            functions=json.loads(functions),
            last_seen_at=last_seen_at,
            seen_ago=max((now - last_seen_at).total_seconds(), 0.0),
        )
        for worker_id, host, pid, functions, last_seen_at, now in rows
    ]
