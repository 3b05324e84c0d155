"""Statements a worker runs on the runs it holds: claim, start, release (renewals: ``leases``).

A claim advances ``attempts``, the fence token every later write of that
attempt carries. A worker may claim a batch ahead of its free slots; those
runs are ``running`` but not started (``attempt_started_at`` is NULL) until a
slot starts them with a fenced write, so until then a cancel ends them at once
and a reclaim after their holder died counts no recovery. Starts skip rows
another transaction has locked (a landing, a cascade) instead of waiting, so
they never take part in a deadlock; a claim takes a run over only once both
its row's lease and any renewal beside it (``leases``) have run out.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from ..types import Run
from . import flow, landing, positional
from .db import RUN_COLUMN_COUNT, WAKE_CHANNEL, cursor, in_transaction, qualified_run_columns, row_to_run
from .leases import LIVE_RENEWAL
from .positional import PositionalStatement

# Whether a limit applies to the run: its function has a concurrency or rate key, or its queue is limited.
# A running run whose lease its holder renewed beside the row while a client transaction had it locked.
_LEASE_RENEWED = LIVE_RENEWAL.format(run="durable_run")

_LIMITED = "(concurrency_key IS NOT NULL OR rate_key IS NOT NULL OR queue = ANY(%(limited_queues)s::text[])) AS limited"

# Whether the run's function or queue is paused (store/pauses.py); the pauses are read once per statement.
_PAUSED = """(('paused:function:' || name) = ANY (ARRAY(SELECT key FROM durable_pause))
            OR ('paused:queue:' || queue) = ANY (ARRAY(SELECT key FROM durable_pause))) AS paused"""

# The flow-control admission of the candidates a limit applies to, and of the runs a rate limit held
# whose window has reopened (migration 0006, store/flow.py; a VOLATILE function sees the release this
# statement made): it locks their limit keys, counts, claims what the limits admit (as many start at
# once as the free slots the plain claim left) and holds back the rest. It runs only when a candidate
# is limited or a held run was released: a claim of unlimited runs never calls it.
_ADMIT = """durable_admit(
    ARRAY(SELECT run_id FROM candidates WHERE limited AND NOT paused
          UNION SELECT run_id FROM released WHERE NOT paused),
    greatest(%(start_now)s - (SELECT count(*) FROM chosen WHERE starts), 0)::int,
    %(lease)s::float8, %(worker_id)s::text,
    %(limit_queues)s::text[], %(queue_concurrency)s::int[], %(queue_rate_limit)s::int[], %(queue_rate_per)s::float8[],
    %(rate_window_guard)s::float8, %(hold_batch)s::int)"""

# The claim's pending arm: due pending runs no limit holds, in claim order, from the claim index (or, for a
# worker bound to a tenant, that tenant's claim index).
_DUE_PENDING = f"""SELECT run_id, priority, created_at, false AS recovered,
           coalesce(available_at, updated_at) AS due_since, {_LIMITED}, {_PAUSED},
           NULL::timestamptz AS prior_start
    FROM durable_run
    WHERE status = 'pending' AND held_by IS NULL AND (available_at IS NULL OR available_at <= now()) {{bounds}}
    ORDER BY priority DESC, created_at
    LIMIT %(limit)s FOR UPDATE SKIP LOCKED"""

# The same for a worker bound to queues: each queue's first runs from the queue claim index, then the first of
# those. Filtering the one claim index by queue would read past every run of the queues it does not serve (a
# backlog of another queue, older or ranked higher, read on every claim); one ordered index scan over
# ``queue = ANY(...)`` would read all of its queues' runs to sort them.
_DUE_PENDING_BY_QUEUE = """SELECT due.* FROM unnest(%(queues)s::text[]) AS bound(queue) CROSS JOIN LATERAL (
        {one_queue}
    ) due
    ORDER BY due.priority DESC, due.created_at
    LIMIT %(limit)s""".replace("{one_queue}", _DUE_PENDING.replace("{bounds}", "AND queue = bound.queue {bounds}"))

# Batch claim: due pending runs, waits whose deadline passed, and runs whose lease
# expired, by priority then age; each claim advances the fence token. The first
# %(start_now)s runs start at once (they go straight to free slots); the rest wait
# for a slot, not started. {bounds} is the worker's filter (see claim_filter):
# plain column tests the planner can estimate, so pending runs are read in index
# order instead of being sorted. A run reclaimed after its lease expired counts a
# recovery only if its holder had started it. Runs a limit applies to (a function's
# concurrency or rate key, a limited queue) are claimed or held by the admission, in
# the same statement; runs a limit holds are not in the claim index at all, and those
# held by a rate limit whose window has reopened are released and go to the admission, as many as
# the free slots (a rate counts a start at its claim, so a run it limits is never claimed ahead of a
# slot: one released beyond them would only go back to the claim index to be held again).
# ``due_since`` is when each run became claimable (its queue lag starts there); ``prior_start``, when the
# attempt of an expired lease had started (a limit's admission does not say: NULL). A due run whose function or
# queue is paused is neither claimed nor admitted: ``durable_hold_paused`` (migration 0018) holds it out of the
# claim index, where it stays, unread by any claim, until the pause ends. A run whose lease expired is not
# held: it was running when the pause came, and running attempts finish.
CLAIM_TEMPLATE = f"""
WITH released AS (
    UPDATE durable_run SET held_by = NULL
    WHERE run_id IN (
        SELECT run_id FROM durable_run
        WHERE status = 'pending' AND available_at IS NOT NULL AND available_at <= now() AND held_by IS NOT NULL
          {{bounds}}
        ORDER BY available_at
        LIMIT %(start_now)s FOR UPDATE SKIP LOCKED)
    RETURNING run_id, {_PAUSED}
), due_pending AS (
    {{due_pending}}
), due_waits AS (
    SELECT run_id, priority, created_at, false AS recovered, available_at AS due_since, {_LIMITED}, {_PAUSED},
           NULL::timestamptz AS prior_start
    FROM durable_run
    WHERE status = 'waiting' AND available_at <= now() {{bounds}}
    ORDER BY available_at
    LIMIT %(limit)s FOR UPDATE SKIP LOCKED
), expired AS (
    SELECT run_id, priority, created_at, attempt_started_at IS NOT NULL AS recovered, leased_until AS due_since,
           {_LIMITED}, false AS paused, attempt_started_at AS prior_start
    FROM durable_run
    -- Without recover the arm is not run at all (a one-time filter); see claim().
    WHERE %(recover)s AND status = 'running' AND leased_until < now() AND NOT {_LEASE_RENEWED} {{bounds}}
    ORDER BY leased_until
    LIMIT %(limit)s FOR UPDATE SKIP LOCKED
), candidates AS (
    SELECT * FROM due_pending UNION ALL SELECT * FROM due_waits UNION ALL SELECT * FROM expired
    ORDER BY priority DESC, created_at
    LIMIT %(limit)s
), chosen AS (
    SELECT *, row_number() OVER (ORDER BY priority DESC, created_at) <= %(start_now)s AS starts
    FROM candidates WHERE NOT limited AND NOT paused
), claimed AS (
    UPDATE durable_run r SET
        status = 'running',
        attempts = r.attempts + 1,
        recoveries = r.recoveries + CASE WHEN chosen.recovered THEN 1 ELSE 0 END,
        leased_until = now() + make_interval(secs => %(lease)s::float8),
        claimed_at = now(),
        attempt_started_at = CASE WHEN chosen.starts THEN now() END,
        started_at = CASE WHEN chosen.starts THEN coalesce(r.started_at, now()) ELSE r.started_at END,
        available_at = NULL,
        waiting_for = NULL,
        worker_id = %(worker_id)s,
        updated_at = now()
    FROM chosen
    WHERE r.run_id = chosen.run_id
    RETURNING {qualified_run_columns("r")}, chosen.recovered, chosen.starts, now(), chosen.due_since,
              chosen.prior_start
)
SELECT * FROM claimed
UNION ALL
SELECT {qualified_run_columns("(admitted.run)")}, admitted.recovered, admitted.started, admitted.database_now,
       admitted.due_since, NULL::timestamptz
FROM {_ADMIT} AS admitted
WHERE EXISTS (SELECT FROM candidates WHERE limited AND NOT paused) OR EXISTS (SELECT FROM released WHERE NOT paused)
UNION ALL
SELECT {qualified_run_columns("(held.run)")}, held.recovered, held.started, held.database_now, held.due_since,
       NULL::timestamptz
FROM durable_hold_paused(
    ARRAY(SELECT run_id FROM candidates WHERE paused UNION SELECT run_id FROM released WHERE paused)) AS held
WHERE EXISTS (SELECT FROM candidates WHERE paused) OR EXISTS (SELECT FROM released WHERE paused)
"""

# When the next run becomes claimable (for an idle worker's sleep): the first of each kind in its index's
# order. Spelled ``min()``, the planner may aggregate every matching row instead when its statistics predate
# them (tens of thousands of runs a rate limit holds, each with its recheck time, read after every claim).
NEXT_DUE_TEMPLATE = """
SELECT least(
    (SELECT available_at FROM durable_run WHERE status = 'pending' AND available_at IS NOT NULL {bounds}
     ORDER BY available_at LIMIT 1),
    (SELECT available_at FROM durable_run WHERE status = 'waiting' AND available_at IS NOT NULL {bounds}
     ORDER BY available_at LIMIT 1),
    (SELECT leased_until FROM durable_run WHERE status = 'running' AND NOT {lease_renewed} {bounds}
     ORDER BY leased_until LIMIT 1),
    (SELECT leased_until FROM durable_lease_renewal WHERE leased_until >= now() ORDER BY leased_until LIMIT 1)
) - now()
""".replace("{lease_renewed}", _LEASE_RENEWED)

# Start a claimed run that waited for a slot: from here it is an attempt that ran.
START = """
UPDATE durable_run SET attempt_started_at = now(), started_at = coalesce(started_at, now())
WHERE run_id = %(run_id)s AND attempts = %(token)s AND status = 'running' AND attempt_started_at IS NULL
RETURNING cancel_requested_at IS NOT NULL AND pivoted_at IS NULL
"""

# Start claimed runs that waited for slots, together (the slots that asked at once). A run another
# transaction has locked right now is reported busy and started on its own (START, which waits for the
# lock), one that is no longer this holder's (or started already) as not held.
START_MANY = """
WITH held AS (SELECT * FROM unnest(%(run_ids)s::text[], %(tokens)s::int[]) AS h(run_id, token)),
mine AS (
    SELECT r.run_id FROM durable_run r JOIN held ON r.run_id = held.run_id AND r.attempts = held.token
    WHERE r.status = 'running' AND r.attempt_started_at IS NULL
    FOR NO KEY UPDATE OF r SKIP LOCKED
),
started AS (
    UPDATE durable_run r SET attempt_started_at = now(), started_at = coalesce(r.started_at, now())
    FROM mine WHERE r.run_id = mine.run_id
    RETURNING r.run_id, r.attempts AS token, r.cancel_requested_at IS NOT NULL AND r.pivoted_at IS NULL AS cancel
)
SELECT held.run_id, held.token, started.run_id IS NOT NULL, coalesce(started.cancel, false),
       EXISTS (SELECT 1 FROM durable_run r WHERE r.run_id = held.run_id AND r.attempts = held.token
                                              AND r.status = 'running' AND r.attempt_started_at IS NULL)
FROM held LEFT JOIN started ON started.run_id = held.run_id AND started.token = held.token
"""

# Hand held runs back (shutdown, or claimed runs no slot started in time) so another worker
# takes them at once; counts nothing. A run whose cancel was requested is not handed back (see
# CANCEL_REQUESTED).
RELEASE = f"""
WITH released AS (
    UPDATE durable_run r SET status = 'pending', leased_until = NULL, available_at = NULL,
        attempt_started_at = NULL, updated_at = now()
    FROM unnest(%(run_ids)s::text[], %(tokens)s::int[]) AS held(run_id, token)
    WHERE r.run_id = held.run_id AND r.attempts = held.token AND r.status = 'running'
      AND (r.cancel_requested_at IS NULL OR r.pivoted_at IS NOT NULL)
    RETURNING r.concurrency_key, r.concurrency_while_waiting, r.started_at IS NOT NULL AS started, r.queue
), woken AS (
    SELECT pg_notify('{WAKE_CHANNEL}', q.queue) FROM (SELECT DISTINCT queue FROM released) q
)
SELECT *, (SELECT count(*) FROM woken) FROM released
"""

# Held runs whose cancel was requested (by an operator, or the cascade of a parent that ended): the
# release lands them cancelled rather than handing them back to be claimed only to be cancelled.
CANCEL_REQUESTED = """
SELECT r.run_id, r.attempts, r.parent_run_id FROM durable_run r
JOIN unnest(%(run_ids)s::text[], %(tokens)s::int[]) AS held(run_id, token)
  ON r.run_id = held.run_id AND r.attempts = held.token
WHERE r.status = 'running' AND r.cancel_requested_at IS NOT NULL AND r.pivoted_at IS NULL
"""


@dataclass(frozen=True, slots=True)
class ClaimBounds:
    """Which runs a worker may claim: SQL conditions and their parameters."""

    sql: str
    params: dict[str, Any] = field(default_factory=dict)
    # The conditions but the queue's, for the pending arm of a worker bound to queues (None: not bound).
    within_queue_sql: str | None = None

    @property
    def claim_statement(self) -> PositionalStatement:
        """The claim statement, converted once (it is over psycopg's cache of converted statements)."""
        return _claim_statement(self.sql, self.within_queue_sql)

    @property
    def next_due_sql(self) -> str:
        return _with_bounds(NEXT_DUE_TEMPLATE, self.sql)


@functools.lru_cache(maxsize=64)
def _with_bounds(template: str, bounds_sql: str) -> str:
    return template.replace("{bounds}", bounds_sql)


@functools.lru_cache(maxsize=64)
def _claim_statement(bounds_sql: str, within_queue_sql: str | None) -> PositionalStatement:
    if within_queue_sql is None:
        due_pending = _DUE_PENDING.replace("{bounds}", bounds_sql)
    else:
        due_pending = _DUE_PENDING_BY_QUEUE.replace("{bounds}", within_queue_sql)
    return PositionalStatement.of(_with_bounds(CLAIM_TEMPLATE.replace("{due_pending}", due_pending), bounds_sql))


@dataclass(frozen=True, slots=True)
class Claimed:
    """One run a claim took: the run as claimed, and how."""

    run: Run
    # It was reclaimed from a holder that had started it and whose lease expired.
    recovered: bool
    # It started with the claim; otherwise it waits for a slot (see START).
    started: bool
    # The database's clock when the claim took it.
    database_now: datetime
    # When it became claimable: due, woken, or its holder's lease expired.
    due_since: datetime
    # When the attempt whose lease expired had started (None: not known, or it had not started).
    previous_attempt_started_at: datetime | None = None


def claim_filter(
    *,
    pairs: Iterable[tuple[str, int]],
    task_paths: bool,
    names: Sequence[str] | None,
    queues: Sequence[str] | None,
    tenant_id: str | None,
) -> ClaimBounds:
    """The conditions that bound a worker's claims.

    Each (name, version) pair it runs is spelled out as column tests, and only
    the filters it has are included, so the statement's plan stays right when
    PostgreSQL caches it (no ``parameter IS NULL OR ...`` arms to guess about).
    """
    params: dict[str, Any] = {}
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
    if tenant_id:
        params["tenant_id"] = tenant_id
        conditions.append("tenant_id = %(tenant_id)s::uuid")
    within_queue_sql = None
    if queues:
        params["queues"] = list(queues)
        within_queue_sql = "AND " + " AND ".join(conditions)
        conditions.append("queue = ANY(%(queues)s::text[])")
    return ClaimBounds(sql="AND " + " AND ".join(conditions), params=params, within_queue_sql=within_queue_sql)


def claim(
    *, limit: int, start_now: int, lease_seconds: float, worker_id: str, bounds: ClaimBounds, recover: bool = True
) -> list[Claimed]:
    """Claim up to ``limit`` runs, the first ``start_now`` started at once; runs a limit applies to are
    admitted or held back by their limits.

    Args:
        recover: take over runs whose lease ran out too. That arm reads the leases index from its oldest
            entry, and while a transaction pins the xmin horizon nothing removes the entries every claim and
            renewal since left behind: a caller that claims often looks for them less often.

    Returns:
        The runs claimed, in claim order, started ones first.
    """
    rows = positional.fetch_all(
        bounds.claim_statement,
        {
            **bounds.params,
            **flow.admission_params(),
            "limit": limit,
            "start_now": start_now,
            "lease": lease_seconds,
            "worker_id": worker_id,
            "recover": recover,
        },
    )
    claimed = [Claimed(row_to_run(row), *row[RUN_COLUMN_COUNT:]) for row in rows]
    # UPDATE ... RETURNING does not keep the candidates' order: restore the claim order.
    claimed.sort(key=lambda item: (not item.started, -item.run.priority, item.run.created_at))
    return claimed


def seconds_until_next_due(bounds: ClaimBounds) -> float | None:
    with cursor() as cur:
        cur.execute(bounds.next_due_sql, bounds.params)
        delta: timedelta | None = cur.fetchone()[0]
    return None if delta is None else delta.total_seconds()


def _pairs(held: list[tuple[str, int]]) -> dict[str, Any]:
    return {"run_ids": [run_id for run_id, _ in held], "tokens": [token for _, token in held]}


def start(run_id: str, token: int) -> bool | None:
    """Start a claimed run that waited for a slot; its cancel flag, or None if it is no longer this holder's."""
    with cursor() as cur:
        cur.execute(START, {"run_id": run_id, "token": token})
        row = cur.fetchone()
    return None if row is None else row[0]


@dataclass(frozen=True, slots=True)
class Start:
    """What starting one claimed run did."""

    # It started: from here it is an attempt that ran.
    started: bool
    # A cancel was requested (and no pivot step was journalled).
    cancel_requested: bool
    # Not started because another transaction had it locked: it is still this holder's (see START).
    busy: bool


def start_many(held: list[tuple[str, int]]) -> dict[tuple[str, int], Start]:
    """Start claimed runs that waited for slots in one statement; one Start per (run_id, token)."""
    with cursor() as cur:
        cur.execute(START_MANY, _pairs(held))
        return {
            (run_id, token): Start(started, cancel, not started and still_waiting)
            for run_id, token, started, cancel, still_waiting in cur.fetchall()
        }


def release(held: list[tuple[str, int]]) -> int:
    """Hand (run_id, token) pairs back as pending, or land them cancelled if their cancel was requested;
    returns how many were still held."""
    if not held:
        return 0
    with cursor() as cur:
        cur.execute(CANCEL_REQUESTED, _pairs(held))
        cancelling = cur.fetchall()
    cancelled = sum(landing.cancel_held(run_id, token, parent) is not None for run_id, token, parent in cancelling)

    def work() -> int:
        with cursor() as cur:
            cur.execute(RELEASE, _pairs(held))
            rows = cur.fetchall()
            flow.release_slots(
                cur,
                [
                    flow.SlotChange(key, while_waiting, started, queue, "running", "pending")
                    for key, while_waiting, started, queue, _ in rows
                ],
            )
        return len(rows)

    return cancelled + in_transaction(work)
