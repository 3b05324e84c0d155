"""The DBOS Transact peer: a workflow of three journalled no-op steps, and its worker process.

Imported in the peers' venv only. Laid out as DBOS's queue-worker guide and its own queue
benchmark lay it out for throughput: a database-backed queue registered once, whose
``worker_concurrency`` caps each process (no global limit); workers that launch the runtime with
a unique ``executor_id``, no admin server and do nothing but dequeue; a ``DBOSClient`` that only
enqueues. The workflow and its steps are plain functions, as DBOS's queue tutorial writes them:
here they cost a worker about 5 ms of CPU per workflow, the async form of DBOS's benchmark 7 to 10.
"""

from __future__ import annotations

import os
import threading
import uuid

from dbos import DBOS, DBOSClient, DBOSConfig

APP_NAME = "bench-peers"
APP_VERSION = "1"
QUEUE_NAME = "bench"
WORKFLOW_NAME = "bench_three_steps"
# DBOS's own queue benchmark: 1,000 workflows per process, 512 executor threads, 5 pooled connections.
WORKER_CONCURRENCY = 1000
EXECUTOR_THREADS = 512
POOL_SIZE = 5


def config(executor_id: str) -> DBOSConfig:
    return {
        "name": APP_NAME,
        "application_version": APP_VERSION,
        "system_database_url": os.environ["DATABASE_URL"],
        "run_admin_server": False,
        "sys_db_pool_size": POOL_SIZE,
        "max_executor_threads": EXECUTOR_THREADS,
        "executor_id": executor_id,
        "log_level": "WARNING",
    }


@DBOS.step()
def noop_step() -> None:
    return None


@DBOS.workflow(name=WORKFLOW_NAME)
def three_steps() -> int:
    for _ in range(3):
        noop_step()
    return 3


def bootstrap() -> None:
    """Create DBOS's system tables and (re)register the queue, before any worker starts."""
    DBOS(config=config("bootstrap"))
    DBOS.launch()
    DBOS.register_queue(QUEUE_NAME, worker_concurrency=WORKER_CONCURRENCY, on_conflict="always_update")
    DBOS.destroy()


def enqueue(n: int) -> None:
    client = DBOSClient(system_database_url=os.environ["DATABASE_URL"], application_name=APP_NAME)
    try:
        for _ in range(n):
            client.enqueue({"queue_name": QUEUE_NAME, "workflow_name": WORKFLOW_NAME, "app_version": APP_VERSION})
    finally:
        client.destroy()


def work() -> None:
    """One worker process: launch the runtime and dequeue until stopped (SIGTERM ends the process)."""
    DBOS(config=config(str(uuid.uuid4())))
    DBOS.launch()
    threading.Event().wait()
