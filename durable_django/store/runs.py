"""Statements on run records: read, find by key, list and resume.

Inserts are in ``inserts``, claims and leases in ``claims``, ends of runs in
``landing``, retention in ``purge``.
"""

from __future__ import annotations

import base64
import json
from datetime import datetime
from typing import Any

import psycopg
from django.db import IntegrityError

from ..exceptions import InvalidInput
from ..states import COALESCE_CONSTRAINT
from ..types import Run
from ..values import text
from .cancellation import lock_parent_of
from .db import (
    RUN_COLUMN_COUNT,
    RUN_COLUMNS,
    WAKE_CHANNEL,
    constraint_of,
    cursor,
    in_transaction,
    row_to_run,
)

# The run an idempotency key already names.
SELECT_BY_IDEMPOTENCY_KEY = f"SELECT {RUN_COLUMNS} FROM durable_run WHERE idempotency_key = %s"

# The runs some idempotency keys already name, with each one's stored key.
SELECT_BY_IDEMPOTENCY_KEYS = f"SELECT {RUN_COLUMNS}, idempotency_key FROM durable_run WHERE idempotency_key = ANY(%s)"

# The unclaimed pending run a coalesce key joins.
SELECT_BY_COALESCE_KEY = f"""
SELECT {RUN_COLUMNS} FROM durable_run WHERE coalesce_key = %s AND status = 'pending' AND attempts = 0
"""

# One run by id, optionally bound to a tenant.
SELECT_RUN = f"""
SELECT {RUN_COLUMNS} FROM durable_run
WHERE run_id = %(run_id)s AND (%(tenant_id)s::uuid IS NULL OR tenant_id = %(tenant_id)s::uuid)
"""

# Several runs by id.
SELECT_RUNS = f"SELECT {RUN_COLUMNS} FROM durable_run WHERE run_id = ANY(%s)"

# Is child_run_id a direct child of run_id?
SELECT_IS_CHILD = "SELECT EXISTS (SELECT 1 FROM durable_run WHERE run_id = %s AND parent_run_id = %s)"

# Newest first, keyset after (created_at, run_id).
LIST_RUNS = f"""
SELECT {RUN_COLUMNS} FROM durable_run
WHERE (%(status)s::text IS NULL OR status = %(status)s)
  AND (%(name)s::text IS NULL OR name = %(name)s)
  AND (%(tenant_id)s::uuid IS NULL OR tenant_id = %(tenant_id)s::uuid)
  AND (%(after_created)s::timestamptz IS NULL OR (created_at, run_id) < (%(after_created)s, %(after_run)s))
ORDER BY created_at DESC, run_id DESC
LIMIT %(limit)s
"""


# A parent's status, read after its lock was taken (a statement of its own).
SELECT_STATUS = "SELECT status FROM durable_run WHERE run_id = %s"

# resume(): a failed or cancelled run goes back to pending with its journal and a fresh budget.
RESUME = f"""
WITH resumed AS (
    UPDATE durable_run SET status = 'pending', failures = 0, recoveries = 0, available_at = NULL,
        leased_until = NULL, finished_at = NULL, waiting_for = NULL, error = NULL, error_type = NULL, deadline = NULL,
        -- A run whose concurrency counts while it waits holds its slot once started: resumed, it is
        -- admitted again first.
        started_at = CASE WHEN concurrency_while_waiting THEN NULL ELSE started_at END,
        cancel_requested_at = NULL, cancel_refused_at = NULL, updated_at = now()
    WHERE run_id = %(run_id)s AND status IN ('failed', 'cancelled')
    RETURNING *
)
SELECT {RUN_COLUMNS}, (SELECT count(*) FROM (SELECT pg_notify('{WAKE_CHANNEL}', queue) FROM resumed) n)
FROM resumed
"""


def find_by_idempotency_keys(stored_keys: list[str]) -> dict[str, Run]:
    """The runs the stored keys name: stored key -> Run."""
    with cursor() as cur:
        cur.execute(SELECT_BY_IDEMPOTENCY_KEYS, [stored_keys])
        return {row[RUN_COLUMN_COUNT]: row_to_run(row) for row in cur.fetchall()}


def find_by_idempotency_key(stored_key: str) -> Run | None:
    with cursor() as cur:
        cur.execute(SELECT_BY_IDEMPOTENCY_KEY, [stored_key])
        row = cur.fetchone()
    return row_to_run(row) if row else None


def find_by_coalesce_key(stored_key: str) -> Run | None:
    with cursor() as cur:
        cur.execute(SELECT_BY_COALESCE_KEY, [stored_key])
        row = cur.fetchone()
    return row_to_run(row) if row else None


def get_run(run_id: str, tenant_id: str | None = None) -> Run | None:
    with cursor() as cur:
        cur.execute(SELECT_RUN, {"run_id": run_id, "tenant_id": tenant_id})
        row = cur.fetchone()
    return row_to_run(row) if row else None


def get_run_committed(session: psycopg.Connection[Any], run_id: str, tenant_id: str | None = None) -> Run | None:
    """The run as committed, read on a session of its own (``listening``'s), outside any caller's transaction."""
    row = session.execute(SELECT_RUN, {"run_id": run_id, "tenant_id": tenant_id}).fetchone()
    return row_to_run(row) if row else None


def get_runs(run_ids: list[str]) -> dict[str, Run]:
    with cursor() as cur:
        cur.execute(SELECT_RUNS, [list(run_ids)])
        return {run.run_id: run for run in map(row_to_run, cur.fetchall())}


def is_direct_child(parent_run_id: str, child_run_id: str) -> bool:
    with cursor() as cur:
        cur.execute(SELECT_IS_CHILD, [child_run_id, parent_run_id])
        is_child: bool = cur.fetchone()[0]
        return is_child


def encode_cursor(created_at: datetime, run_id: str) -> str:
    raw = json.dumps([created_at.isoformat(), run_id]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(token: str) -> tuple[datetime, str]:
    try:
        padded = token + "=" * (-len(token) % 4)
        created, run_id = json.loads(base64.urlsafe_b64decode(padded.encode()))
        return datetime.fromisoformat(created), text(str(run_id), what="a cursor's run id")
    except (ValueError, TypeError, AttributeError, InvalidInput) as exc:
        raise InvalidInput(f"invalid cursor {token!r}") from exc


def list_runs(
    *,
    status: str | None,
    name: str | None,
    tenant_id: str | None,
    limit: int,
    after: tuple[datetime, str] | None,
) -> tuple[list[Run], str | None]:
    after_created, after_run = after or (None, None)
    with cursor() as cur:
        cur.execute(
            LIST_RUNS,
            {
                "status": status,
                "name": name,
                "tenant_id": tenant_id,
                "limit": limit + 1,
                "after_created": after_created,
                "after_run": after_run,
            },
        )
        runs = [row_to_run(row) for row in cur.fetchall()]
    more = len(runs) > limit
    runs = runs[:limit]
    next_cursor = encode_cursor(runs[-1].created_at, runs[-1].run_id) if more else None
    return runs, next_cursor


def resume(run_id: str, tenant_id: str | None) -> Run | None:
    """Resume a failed or cancelled run; None if no such run is visible or it is not resumable.

    Raises:
        InvalidInput: the run's parent has finished, so nothing would ever wait for it again; or it was
            never claimed and another unclaimed run took its coalesce key meanwhile.
    """
    params = {"run_id": run_id, "tenant_id": tenant_id}

    def work() -> Run | None:
        with cursor() as cur:
            found, parent_run_id = lock_parent_of(cur, params)
            if not found:
                return None
            if parent_run_id is not None:
                cur.execute(SELECT_STATUS, [parent_run_id])
                parent = cur.fetchone()
                if parent is None or parent[0] in ("succeeded", "failed", "cancelled"):
                    raise InvalidInput(
                        f"run {run_id} is a child of run {parent_run_id}, which has finished: resume the parent, "
                        "or retry this run as a new run",
                        run_id=run_id,
                    )
            try:
                cur.execute(RESUME, params)
            except IntegrityError as exc:
                if constraint_of(exc) != COALESCE_CONSTRAINT:
                    raise
                raise InvalidInput(
                    f"run {run_id} was never claimed and another unclaimed run now holds its coalesce key: "
                    "that run does its work; retry this one as a new run if it must run too",
                    run_id=run_id,
                ) from None
            row = cur.fetchone()
        return row_to_run(row) if row else None

    return in_transaction(work)
