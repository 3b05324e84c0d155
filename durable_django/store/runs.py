"""Reads of run records: one run, by key, and pages of runs.

Inserts are in ``inserts``, claims and leases in ``claims``, ends of runs in
``landing``, resumes in ``resumes``, retention in ``purge``. This module writes
nothing, so the client API may read through it (see .importlinter).
"""

from __future__ import annotations

import base64
import json
from datetime import datetime
from typing import Any

import psycopg

from ..exceptions import InvalidInput
from ..storable import instant, name, shown
from ..types import Run
from .db import RUN_COLUMN_COUNT, RUN_COLUMNS, cursor, row_to_run

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

# Several runs by id (a bulk batch's, the runs a cancel ended).
SELECT_RUNS = f"SELECT {RUN_COLUMNS} FROM durable_run WHERE run_id = ANY(%s)"

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


# The same, of the runs whose input contains a JSON document (through the input's GIN index).
LIST_RUNS_BY_INPUT = f"""
SELECT {RUN_COLUMNS} FROM durable_run
WHERE input @> %(input_contains)s::jsonb
  AND (%(status)s::text IS NULL OR status = %(status)s)
  AND (%(name)s::text IS NULL OR name = %(name)s)
  AND (%(tenant_id)s::uuid IS NULL OR tenant_id = %(tenant_id)s::uuid)
  AND (%(after_created)s::timestamptz IS NULL OR (created_at, run_id) < (%(after_created)s, %(after_run)s))
ORDER BY created_at DESC, run_id DESC
LIMIT %(limit)s
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


def get_runs(run_ids: list[str]) -> dict[str, Run]:
    """The runs of ``run_ids`` that exist, by id."""
    with cursor() as cur:
        cur.execute(SELECT_RUNS, [list(run_ids)])
        return {run.run_id: run for run in map(row_to_run, cur.fetchall())}


def get_run_committed(session: psycopg.Connection[Any], run_id: str, tenant_id: str | None = None) -> Run | None:
    """The run as committed, read on a session of its own (``listening``'s), outside any caller's transaction."""
    row = session.execute(SELECT_RUN, {"run_id": run_id, "tenant_id": tenant_id}).fetchone()
    return row_to_run(row) if row else None


def encode_cursor(created_at: datetime, run_id: str) -> str:
    raw = json.dumps([created_at.isoformat(), run_id]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(token: object) -> tuple[datetime, str]:
    """The (created_at, run_id) a cursor of encode_cursor() holds.

    Raises:
        InvalidInput: not such a cursor: a forged one may hold anything (deep JSON, lone surrogates, a
            naive or far-off datetime), and none of it may reach a statement.
    """
    try:
        text_token = name(token, what="a cursor")
        padded = text_token + "=" * (-len(text_token) % 4)
        created, run_id = json.loads(base64.urlsafe_b64decode(padded.encode()))
        after = instant(datetime.fromisoformat(created), what="a cursor's instant")
        assert after is not None  # fromisoformat() never returns None
        return after, name(run_id, what="a cursor's run id")
    except (ValueError, TypeError, AttributeError, RecursionError, InvalidInput) as exc:
        raise InvalidInput(f"invalid cursor {shown(token)}") from exc


def list_runs(
    *,
    status: str | None,
    name: str | None,
    tenant_id: str | None,
    limit: int,
    after: tuple[datetime, str] | None,
    input_contains: str | None = None,
) -> tuple[list[Run], str | None]:
    """A page of runs, newest first; ``input_contains``: only runs whose input contains this JSON text."""
    after_created, after_run = after or (None, None)
    with cursor() as cur:
        cur.execute(
            LIST_RUNS if input_contains is None else LIST_RUNS_BY_INPUT,
            {
                "input_contains": input_contains,
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
