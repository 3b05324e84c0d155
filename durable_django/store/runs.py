"""Statements on durable_run: enqueue, claim, lease, land, cancel, resume, list, purge.

Every write a worker makes is fenced on ``attempts`` (the claim's token) and on
``status = 'running'``: a holder whose lease was taken over changes nothing.
"""

from __future__ import annotations

import base64
import functools
import json
import uuid
from dataclasses import dataclass
from datetime import datetime

from django.db import transaction

from ..exceptions import InvalidInput
from ..states import CancelOutcome
from .db import (
    DONE_CHANNEL, RUN_COLUMNS, RUN_COLUMN_COUNT, WAKE_CHANNEL, connection, cursor, qualified_run_columns, row_to_run,
)
from .landing import landing_sql

_WAKE_IF_DUE = f"""
    wake AS (
        SELECT pg_notify('{WAKE_CHANNEL}', queue) FROM (
            SELECT DISTINCT queue FROM inserted WHERE available_at IS NULL OR available_at <= now()) q
    )
"""

# Insert a run unless its idempotency key or coalesce key already names one; wake workers.
INSERT_RUN = f"""
WITH inserted AS (
    INSERT INTO durable_run (
        run_id, name, version, status, idempotency_key, coalesce_key, input, tenant_id, retry_policy,
        queue, priority, parent_run_id, available_at, created_at, updated_at)
    VALUES (
        %(run_id)s, %(name)s, %(version)s, 'pending', %(idempotency_key)s, %(coalesce_key)s,
        %(input)s::jsonb, %(tenant_id)s, %(retry_policy)s::jsonb, %(queue)s, %(priority)s, %(parent_run_id)s,
        CASE WHEN %(delay)s::float8 IS NULL THEN %(available_at)s::timestamptz
             ELSE now() + make_interval(secs => %(delay)s::float8) END,
        clock_timestamp(), clock_timestamp())
    ON CONFLICT DO NOTHING
    RETURNING *
),
{_WAKE_IF_DUE}
SELECT {RUN_COLUMNS}, (SELECT count(*) FROM wake) FROM inserted
"""

# The run an idempotency key already names.
SELECT_BY_IDEMPOTENCY_KEY = f"SELECT {RUN_COLUMNS} FROM durable_run WHERE idempotency_key = %s"

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

# Batch claim: due pending runs, waits whose deadline passed, and runs whose lease
# expired (recovery), by priority then age; each claim advances the fence token.
# {bounds} is the worker's filter (see claim_filter): plain column tests the
# planner can estimate, so it reads pending runs in index order instead of
# sorting them all.
CLAIM_TEMPLATE = f"""
WITH due_pending AS (
    SELECT run_id, priority, created_at, false AS recovered FROM durable_run
    WHERE status = 'pending' AND (available_at IS NULL OR available_at <= now()) {{bounds}}
    ORDER BY priority DESC, created_at
    LIMIT %(limit)s FOR UPDATE SKIP LOCKED
), due_waits AS (
    SELECT run_id, priority, created_at, false AS recovered FROM durable_run
    WHERE status = 'waiting' AND available_at <= now() {{bounds}}
    ORDER BY available_at
    LIMIT %(limit)s FOR UPDATE SKIP LOCKED
), expired AS (
    SELECT run_id, priority, created_at, true AS recovered FROM durable_run
    WHERE status = 'running' AND leased_until < now() {{bounds}}
    ORDER BY leased_until
    LIMIT %(limit)s FOR UPDATE SKIP LOCKED
), chosen AS (
    SELECT * FROM due_pending UNION ALL SELECT * FROM due_waits UNION ALL SELECT * FROM expired
    ORDER BY priority DESC, created_at
    LIMIT %(limit)s
)
UPDATE durable_run r SET
    status = 'running',
    attempts = r.attempts + 1,
    recoveries = r.recoveries + CASE WHEN chosen.recovered THEN 1 ELSE 0 END,
    leased_until = now() + make_interval(secs => %(lease)s::float8),
    claimed_at = now(),
    started_at = coalesce(r.started_at, now()),
    available_at = NULL,
    waiting_for = NULL,
    worker_id = %(worker_id)s,
    updated_at = now()
FROM chosen
WHERE r.run_id = chosen.run_id
RETURNING {qualified_run_columns("r")}, chosen.recovered, now()
"""

# When the next run becomes claimable (for an idle worker's sleep).
NEXT_DUE_TEMPLATE = """
SELECT least(
    (SELECT min(available_at) FROM durable_run WHERE status = 'pending' AND available_at IS NOT NULL {bounds}),
    (SELECT min(available_at) FROM durable_run WHERE status = 'waiting' AND available_at IS NOT NULL {bounds}),
    (SELECT min(leased_until) FROM durable_run WHERE status = 'running' {bounds})
) - now()
"""


@dataclass(frozen=True, slots=True)
class ClaimBounds:
    """Which runs a worker may claim: SQL conditions and their parameters."""

    sql: str
    params: dict

    @property
    def claim_sql(self) -> str:
        return _with_bounds(CLAIM_TEMPLATE, self.sql)

    @property
    def next_due_sql(self) -> str:
        return _with_bounds(NEXT_DUE_TEMPLATE, self.sql)


@functools.lru_cache(maxsize=64)
def _with_bounds(template: str, bounds_sql: str) -> str:
    return template.replace("{bounds}", bounds_sql)


# Renew the leases of a batch of held runs; the answer carries each run's cancel flag.
HEARTBEAT = """
UPDATE durable_run r SET leased_until = now() + make_interval(secs => %(lease)s::float8)
FROM unnest(%(run_ids)s::text[], %(tokens)s::int[]) AS held(run_id, token)
WHERE r.run_id = held.run_id AND r.attempts = held.token AND r.status = 'running'
RETURNING r.run_id, r.cancel_requested_at IS NOT NULL AND r.pivoted_at IS NULL
"""

_FENCE = "run_id = %(run_id)s AND attempts = %(token)s AND status = 'running'"

# Land a run succeeded with its output.
COMPLETE = landing_sql(f"""
    UPDATE durable_run SET status = 'succeeded', output = %(output)s::jsonb, leased_until = NULL,
        finished_at = now(), updated_at = now()
    WHERE {_FENCE}
    RETURNING run_id, parent_run_id, status, queue, true AS cascade
""")

# Land a run that has no parent and no children succeeded: nothing to wake or cascade,
# so a plain fenced UPDATE (the common case, and the cheaper statement). Refused otherwise.
COMPLETE_ALONE = f"""
WITH landed AS (
    UPDATE durable_run SET status = 'succeeded', output = %(output)s::jsonb, leased_until = NULL,
        finished_at = now(), updated_at = now()
    WHERE {_FENCE} AND parent_run_id IS NULL AND NOT has_children
    RETURNING run_id
)
SELECT run_id, pg_notify('{DONE_CHANNEL}', run_id) FROM landed
"""

# The same for a batch of held runs.
COMPLETE_MANY_ALONE = f"""
WITH landed AS (
    UPDATE durable_run r SET status = 'succeeded', output = done.output::jsonb, leased_until = NULL,
        finished_at = now(), updated_at = now()
    FROM unnest(%(run_ids)s::text[], %(tokens)s::int[], %(outputs)s::text[]) AS done(run_id, token, output)
    WHERE r.run_id = done.run_id AND r.attempts = done.token AND r.status = 'running'
      AND r.parent_run_id IS NULL AND NOT r.has_children
    RETURNING r.run_id
)
SELECT run_id, pg_notify('{DONE_CHANNEL}', run_id) FROM landed
"""

# Land a batch of held runs succeeded with their outputs, in one statement and one commit.
COMPLETE_MANY = landing_sql("""
    UPDATE durable_run r SET status = 'succeeded', output = done.output::jsonb, leased_until = NULL,
        finished_at = now(), updated_at = now()
    FROM unnest(%(run_ids)s::text[], %(tokens)s::int[], %(outputs)s::text[]) AS done(run_id, token, output)
    WHERE r.run_id = done.run_id AND r.attempts = done.token AND r.status = 'running'
    RETURNING r.run_id, r.parent_run_id, r.status, r.queue, true AS cascade
""")

_FAIL_STATUS = """CASE
    WHEN cancel_requested_at IS NOT NULL AND pivoted_at IS NULL THEN 'cancelled'
    WHEN %(final)s THEN 'failed'
    ELSE 'pending' END"""

# Record a failed attempt: retry after a delay, or land failed (cancelled if a cancel was requested).
FAIL = landing_sql(f"""
    UPDATE durable_run SET
        failures = failures + %(counts)s::int,
        status = {_FAIL_STATUS},
        available_at = CASE WHEN {_FAIL_STATUS} = 'pending'
                            THEN now() + make_interval(secs => %(delay)s::float8) END,
        finished_at = CASE WHEN {_FAIL_STATUS} = 'pending' THEN NULL ELSE now() END,
        error = %(error)s, error_type = %(error_type)s, leased_until = NULL, updated_at = now()
    WHERE {_FENCE}
    RETURNING run_id, parent_run_id, status, queue, status <> 'pending' AS cascade
""")

# Land a held run cancelled (its cancel was requested and it reached a context call or heartbeat).
CANCEL_HELD = landing_sql(f"""
    UPDATE durable_run SET status = 'cancelled', leased_until = NULL, finished_at = now(), updated_at = now()
    WHERE {_FENCE} AND pivoted_at IS NULL
    RETURNING run_id, parent_run_id, status, queue, true AS cascade
""")

# Lock a run for cancel() and read what decides the outcome.
LOCK_FOR_CANCEL = """
SELECT status, pivoted_at IS NOT NULL FROM durable_run
WHERE run_id = %(run_id)s AND (%(tenant_id)s::uuid IS NULL OR tenant_id = %(tenant_id)s::uuid)
FOR UPDATE
"""

# cancel() of a pending or waiting run: it and its tree end now.
CANCEL_NOW = landing_sql("""
    UPDATE durable_run SET status = 'cancelled', cancel_requested_at = coalesce(cancel_requested_at, now()),
        finished_at = now(), waiting_for = NULL, available_at = NULL, updated_at = now()
    WHERE run_id = %(run_id)s
    RETURNING run_id, parent_run_id, status, queue, true AS cascade
""")

# cancel() of a running run: ask it to stop; its tree gets the same rule.
CANCEL_REQUEST = landing_sql("""
    UPDATE durable_run SET cancel_requested_at = coalesce(cancel_requested_at, now()), updated_at = now()
    WHERE run_id = %(run_id)s
    RETURNING run_id, parent_run_id, status, queue, true AS cascade
""")

# cancel() of a finished or pivoted run: note the first refusal, change nothing else.
CANCEL_REFUSE = """
UPDATE durable_run SET cancel_refused_at = coalesce(cancel_refused_at, now()) WHERE run_id = %(run_id)s
"""

# Hand held runs back at shutdown so another worker takes them at once; counts nothing.
RELEASE = f"""
WITH released AS (
    UPDATE durable_run r SET status = 'pending', leased_until = NULL, available_at = NULL, updated_at = now()
    FROM unnest(%(run_ids)s::text[], %(tokens)s::int[]) AS held(run_id, token)
    WHERE r.run_id = held.run_id AND r.attempts = held.token AND r.status = 'running'
    RETURNING r.queue
)
SELECT count(*), (SELECT count(*) FROM (SELECT pg_notify('{WAKE_CHANNEL}', q.queue)
                                       FROM (SELECT DISTINCT queue FROM released) q) n)
FROM released
"""

# resume(): a failed or cancelled run goes back to pending with its journal and a fresh budget.
RESUME = f"""
WITH resumed AS (
    UPDATE durable_run SET status = 'pending', failures = 0, recoveries = 0, available_at = NULL,
        leased_until = NULL, finished_at = NULL, waiting_for = NULL, error = NULL, error_type = NULL,
        cancel_requested_at = NULL, cancel_refused_at = NULL, updated_at = now()
    WHERE run_id = %(run_id)s AND (%(tenant_id)s::uuid IS NULL OR tenant_id = %(tenant_id)s::uuid)
      AND status IN ('failed', 'cancelled')
    RETURNING *
)
SELECT {RUN_COLUMNS}, (SELECT count(*) FROM (SELECT pg_notify('{WAKE_CHANNEL}', queue) FROM resumed) n)
FROM resumed
"""

# One purge batch: whole finished trees whose every member landed before the cutoff,
# oldest root landings first, after a keyset position; steps and signals go with their runs.
PURGE_BATCH = """
WITH RECURSIVE candidates AS (
    SELECT run_id, updated_at, parent_run_id FROM (
        (SELECT run_id, updated_at, parent_run_id FROM durable_run
         WHERE status = 'succeeded' AND updated_at < %(cutoff)s
           AND (updated_at, run_id) > (%(after_at)s, %(after_id)s)
         ORDER BY updated_at, run_id LIMIT %(limit)s)
        UNION ALL
        (SELECT run_id, updated_at, parent_run_id FROM durable_run
         WHERE status = 'failed' AND updated_at < %(cutoff)s
           AND (updated_at, run_id) > (%(after_at)s, %(after_id)s)
         ORDER BY updated_at, run_id LIMIT %(limit)s)
        UNION ALL
        (SELECT run_id, updated_at, parent_run_id FROM durable_run
         WHERE status = 'cancelled' AND updated_at < %(cutoff)s
           AND (updated_at, run_id) > (%(after_at)s, %(after_id)s)
         ORDER BY updated_at, run_id LIMIT %(limit)s)
        ORDER BY updated_at, run_id
        LIMIT %(limit)s
    ) oldest
),
roots AS (
    -- Children are deleted with their tree, never on their own.
    SELECT run_id FROM candidates
    WHERE parent_run_id IS NULL
       OR NOT EXISTS (SELECT 1 FROM durable_run p WHERE p.run_id = candidates.parent_run_id)
),
tree AS (
    SELECT run_id AS root, run_id FROM roots
    UNION ALL
    SELECT tree.root, c.run_id FROM durable_run c JOIN tree ON c.parent_run_id = tree.run_id
),
blocked AS (
    SELECT DISTINCT tree.root FROM tree JOIN durable_run d USING (run_id)
    WHERE d.status IN ('pending', 'running', 'waiting') OR d.updated_at >= %(cutoff)s
),
locked AS (
    -- Lock the members, re-reading each (a resume may have just made one live again).
    SELECT tree.root, d.run_id FROM durable_run d JOIN tree USING (run_id)
    WHERE tree.root NOT IN (SELECT root FROM blocked)
      AND d.status IN ('succeeded', 'failed', 'cancelled')
    FOR UPDATE OF d
),
members AS (SELECT root, count(*) AS total FROM tree GROUP BY root),
held AS (SELECT root, count(*) AS total FROM locked GROUP BY root),
doomed AS (
    -- Only trees whose every member is still finished and now locked go, whole.
    SELECT locked.run_id FROM locked
    JOIN held USING (root) JOIN members USING (root)
    WHERE held.total = members.total
),
deleted_steps AS (DELETE FROM durable_step WHERE run_id IN (SELECT run_id FROM doomed)),
deleted_signals AS (DELETE FROM durable_signal WHERE run_id IN (SELECT run_id FROM doomed)),
deleted AS (DELETE FROM durable_run WHERE run_id IN (SELECT run_id FROM doomed) RETURNING run_id)
SELECT (SELECT count(*) FROM deleted),
       (SELECT updated_at FROM candidates ORDER BY updated_at DESC, run_id DESC LIMIT 1),
       (SELECT run_id FROM candidates ORDER BY updated_at DESC, run_id DESC LIMIT 1)
"""


def new_run_id() -> str:
    return str(uuid.uuid4())


def insert_run(params: dict):
    """Insert a run; returns the Run, or None when a key joined an existing one."""
    with cursor() as cur:
        cur.execute(INSERT_RUN, params)
        row = cur.fetchone()
    return row_to_run(row) if row else None


def find_by_idempotency_key(stored_key: str):
    with cursor() as cur:
        cur.execute(SELECT_BY_IDEMPOTENCY_KEY, [stored_key])
        row = cur.fetchone()
    return row_to_run(row) if row else None


def find_by_coalesce_key(stored_key: str):
    with cursor() as cur:
        cur.execute(SELECT_BY_COALESCE_KEY, [stored_key])
        row = cur.fetchone()
    return row_to_run(row) if row else None


def get_run(run_id: str, tenant_id: str | None = None):
    with cursor() as cur:
        cur.execute(SELECT_RUN, {"run_id": run_id, "tenant_id": tenant_id})
        row = cur.fetchone()
    return row_to_run(row) if row else None


def get_runs(run_ids: list[str]) -> dict:
    with cursor() as cur:
        cur.execute(SELECT_RUNS, [list(run_ids)])
        return {run.run_id: run for run in map(row_to_run, cur.fetchall())}


def is_direct_child(parent_run_id: str, child_run_id: str) -> bool:
    with cursor() as cur:
        cur.execute(SELECT_IS_CHILD, [child_run_id, parent_run_id])
        return cur.fetchone()[0]


def encode_cursor(created_at: datetime, run_id: str) -> str:
    raw = json.dumps([created_at.isoformat(), run_id]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(token: str) -> tuple[datetime, str]:
    try:
        padded = token + "=" * (-len(token) % 4)
        created, run_id = json.loads(base64.urlsafe_b64decode(padded.encode()))
        return datetime.fromisoformat(created), str(run_id)
    except (ValueError, TypeError, AttributeError) as exc:
        raise InvalidInput(f"invalid cursor {token!r}") from exc


def list_runs(*, status, name, tenant_id, limit, after):
    after_created, after_run = after or (None, None)
    with cursor() as cur:
        cur.execute(LIST_RUNS, {
            "status": status, "name": name, "tenant_id": tenant_id, "limit": limit + 1,
            "after_created": after_created, "after_run": after_run,
        })
        runs = [row_to_run(row) for row in cur.fetchall()]
    more = len(runs) > limit
    runs = runs[:limit]
    next_cursor = encode_cursor(runs[-1].created_at, runs[-1].run_id) if more else None
    return runs, next_cursor


def claim_filter(*, pairs, task_paths, names, queues, tenant_id) -> ClaimBounds:
    """The conditions that bound a worker's claims.

    Each (name, version) pair it runs is spelled out as column tests, and only
    the filters it has are included, so the statement's plan stays right when
    PostgreSQL caches it (no ``parameter IS NULL OR ...`` arms to guess about).
    """
    params: dict = {}
    alternatives = []
    for index, (name, version) in enumerate(pairs):
        params[f"name_{index}"], params[f"version_{index}"] = name, version
        alternatives.append(f"(name = %(name_{index})s AND version = %(version_{index})s::int)")
    if task_paths:
        if names:
            params["task_names"] = list(names)
            alternatives.append("(version = 0 AND name = ANY(%(task_names)s::text[]))")
        else:
            alternatives.append("version = 0")
    conditions = ["(" + " OR ".join(alternatives) + ")" if alternatives else "false"]
    if queues:
        params["queues"] = list(queues)
        conditions.append("queue = ANY(%(queues)s::text[])")
    if tenant_id:
        params["tenant_id"] = tenant_id
        conditions.append("tenant_id = %(tenant_id)s::uuid")
    return ClaimBounds(sql="AND " + " AND ".join(conditions), params=params)


def claim(*, limit: int, lease_seconds: float, worker_id: str, bounds: ClaimBounds):
    """Claim up to ``limit`` runs; returns [(Run, recovered, database_now)]."""
    with cursor() as cur:
        cur.execute(bounds.claim_sql, {**bounds.params, "limit": limit, "lease": lease_seconds,
                                       "worker_id": worker_id})
        rows = cur.fetchall()
    claimed = [(row_to_run(row), row[RUN_COLUMN_COUNT], row[RUN_COLUMN_COUNT + 1]) for row in rows]
    # UPDATE ... RETURNING does not keep the candidates' order: restore the claim order.
    claimed.sort(key=lambda item: (-item[0].priority, item[0].created_at))
    return claimed


def seconds_until_next_due(bounds: ClaimBounds) -> float | None:
    with cursor() as cur:
        cur.execute(bounds.next_due_sql, bounds.params)
        delta = cur.fetchone()[0]
    return None if delta is None else delta.total_seconds()


def heartbeat(held: list[tuple[str, int]], lease_seconds: float) -> dict[str, bool]:
    """Extend leases; returns {run_id: cancel_requested} for the runs still held."""
    if not held:
        return {}
    with cursor() as cur:
        cur.execute(HEARTBEAT, {
            "lease": lease_seconds, "run_ids": [r for r, _ in held], "tokens": [t for _, t in held],
        })
        return dict(cur.fetchall())


def _land(sql: str, params: dict) -> str | None:
    """Run a landing statement; returns the run's new status, or None if the fence refused it."""
    with cursor() as cur:
        cur.execute(sql, params)
        row = cur.fetchone()
    return row[1] if row else None


def complete(run_id: str, token: int, output_json: str) -> str | None:
    """Land a held run succeeded; the plain statement first, the full landing if it has kin."""
    params = {"run_id": run_id, "token": token, "output": output_json}
    with cursor() as cur:
        cur.execute(COMPLETE_ALONE, params)
        if cur.fetchone() is not None:
            return "succeeded"
    return _land(COMPLETE, params)


def complete_many(finished: list[tuple[str, int, str]]) -> set[str]:
    """Land (run_id, token, output JSON) triples succeeded; returns the run ids the fence let through."""
    def batch(items):
        return {"run_ids": [run_id for run_id, _, _ in items], "tokens": [token for _, token, _ in items],
                "outputs": [output for _, _, output in items]}

    with cursor() as cur:
        cur.execute(COMPLETE_MANY_ALONE, batch(finished))
        landed = {row[0] for row in cur.fetchall()}
        with_kin = [item for item in finished if item[0] not in landed]
        if with_kin:  # runs with a parent or children, and runs the fence refused
            cur.execute(COMPLETE_MANY, batch(with_kin))
            landed.update(row[0] for row in cur.fetchall())
    return landed


def fail(run_id: str, token: int, *, error: str, error_type: str, final: bool, delay: float,
         counts_as_failure: bool = True) -> str | None:
    return _land(FAIL, {
        "run_id": run_id, "token": token, "error": error, "error_type": error_type,
        "final": final, "delay": delay, "counts": 1 if counts_as_failure else 0,
    })


def cancel_held(run_id: str, token: int) -> str | None:
    return _land(CANCEL_HELD, {"run_id": run_id, "token": token})


def cancel(run_id: str, tenant_id: str | None):
    """cancel(): returns the CancelOutcome, or None if no such run is visible."""
    params = {"run_id": run_id, "tenant_id": tenant_id}
    with transaction.atomic(using=connection().alias):
        with cursor() as cur:
            cur.execute(LOCK_FOR_CANCEL, params)
            row = cur.fetchone()
            if row is None:
                return None
            status, pivoted = row
            if status in ("pending", "waiting") and not pivoted:
                cur.execute(CANCEL_NOW, params)
                return CancelOutcome.CANCELLED
            if status == "running" and not pivoted:
                cur.execute(CANCEL_REQUEST, params)
                return CancelOutcome.REQUESTED
            cur.execute(CANCEL_REFUSE, params)
            return CancelOutcome.REFUSED


def release(held: list[tuple[str, int]]) -> int:
    if not held:
        return 0
    with cursor() as cur:
        cur.execute(RELEASE, {"run_ids": [r for r, _ in held], "tokens": [t for _, t in held]})
        return cur.fetchone()[0]


def resume(run_id: str, tenant_id: str | None):
    with cursor() as cur:
        cur.execute(RESUME, {"run_id": run_id, "tenant_id": tenant_id})
        row = cur.fetchone()
    return row_to_run(row) if row else None


_EPOCH = datetime.fromisoformat("1970-01-01T00:00:00+00:00")


def purge_batch(cutoff: datetime, limit: int, after: tuple | None):
    """Delete one batch of whole finished trees; returns (runs deleted, keyset position or None)."""
    after_at, after_id = after or (_EPOCH, "")
    with cursor() as cur:
        cur.execute(PURGE_BATCH, {
            "cutoff": cutoff, "limit": limit, "after_at": after_at, "after_id": after_id,
        })
        deleted, last_at, last_id = cur.fetchone()
    return deleted, (None if last_at is None else (last_at, last_id))

