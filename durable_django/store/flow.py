"""Flow control in SQL: admitting limited runs, holding back the others, and releasing them.

A limit's key is serialised by a transaction-level advisory lock, taken in one
order (by its hash) by every transaction that decides on it: a claim that
admits or holds runs, and a transaction that frees a slot and releases a held
run. Usage is counted from the runs themselves in a statement after the locks
(no counter can drift): a function key's holders through a partial index of
exactly the runs holding its slots, a queue's through the running runs, a rate
key's starts in ``durable_rate_start``. A held run has ``held_by`` set and is
out of the claim index, so no claim scans it; a freed slot releases the first
run held by its key.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from django.db.backends.utils import CursorWrapper

from ..limits import (
    QUEUE_CONCURRENCY_PREFIX,
    QueueLimits,
    configured_queue_limits,
    queue_concurrency_reason,
    queue_rate_reason,
)
from ..types import Run
from .db import RUN_COLUMN_COUNT, WAKE_CHANNEL, cursor, in_transaction, qualified_run_columns, row_to_run

# Serialise decisions on these limit keys for the rest of the transaction, in one order everywhere.
LOCK_KEYS = """
SELECT pg_advisory_xact_lock(h) FROM (
    SELECT DISTINCT hashtextextended(k, 0) AS h FROM unnest(%(keys)s::text[]) AS k ORDER BY 1
) ordered
"""

# The candidates, locked (skipping any another claim took meanwhile) and still claimable, read after
# the key locks: what they are, and whether each already holds its function key's slot.
LOCK_CANDIDATES = f"""
SELECT {qualified_run_columns("r")}, r.concurrency_key, r.concurrency_limit, r.concurrency_while_waiting,
       r.rate_key, r.rate_limit, r.rate_per,
       r.status = 'running' AND r.leased_until < now() AND r.attempt_started_at IS NOT NULL AS recovered,
       r.status = 'running' OR (r.concurrency_while_waiting AND r.started_at IS NOT NULL
                                AND r.status IN ('pending', 'waiting')) AS holds_slot,
       r.status = 'running' AS holds_queue_slot
FROM durable_run r
WHERE r.run_id = ANY(%(run_ids)s::text[])
  AND r.held_by IS NULL
  AND ((r.status = 'pending' AND (r.available_at IS NULL OR r.available_at <= now()))
       OR (r.status = 'waiting' AND r.available_at <= now())
       OR (r.status = 'running' AND r.leased_until < now()))
FOR UPDATE OF r SKIP LOCKED
"""

# How much of each limit is in use, counted after the key locks (by this statement's clock: the locks
# may have waited for other claims, whose starts must fall in the window).
USAGE = """
SELECT 'concurrency', key, (
    SELECT count(*) FROM durable_run
    WHERE concurrency_key = key AND concurrency_key IS NOT NULL
      AND (status = 'running' OR (concurrency_while_waiting AND started_at IS NOT NULL
                                  AND status = ANY (ARRAY['pending', 'waiting'])))
), NULL::timestamptz
FROM unnest(%(concurrency_keys)s::text[]) AS key
UNION ALL
SELECT 'queue', queue, (SELECT count(*) FROM durable_run WHERE status = 'running' AND durable_run.queue = q.queue),
       NULL::timestamptz
FROM unnest(%(queues)s::text[]) AS q(queue)
UNION ALL
SELECT 'rate', w.key, count(s.started_at), min(s.started_at)
FROM unnest(%(rate_keys)s::text[], %(rate_pers)s::float8[]) AS w(key, per)
LEFT JOIN durable_rate_start s ON s.key = w.key AND s.started_at > statement_timestamp() - make_interval(secs => w.per)
GROUP BY w.key
UNION ALL
SELECT 'now', NULL, NULL, statement_timestamp()
"""

# Claim admitted runs and record their rate-limited starts. Its clock is this statement's, not the
# transaction's: the key locks may have waited, and a start is counted when its claim commits.
CLAIM = f"""
WITH chosen AS (
    SELECT * FROM unnest(%(run_ids)s::text[], %(starts)s::bool[], %(recovered)s::bool[])
        AS c(run_id, starts, recovered)
), starts AS (
    INSERT INTO durable_rate_start (key, started_at, expires_at)
    SELECT key, statement_timestamp(), statement_timestamp() + make_interval(secs => per)
    FROM unnest(%(rate_keys)s::text[], %(rate_pers)s::float8[]) AS s(key, per)
), claimed AS (
    UPDATE durable_run r SET
        status = 'running',
        attempts = r.attempts + 1,
        recoveries = r.recoveries + CASE WHEN chosen.recovered THEN 1 ELSE 0 END,
        leased_until = statement_timestamp() + make_interval(secs => %(lease)s::float8),
        claimed_at = statement_timestamp(),
        attempt_started_at = CASE WHEN chosen.starts THEN statement_timestamp() END,
        started_at = CASE WHEN chosen.starts THEN coalesce(r.started_at, statement_timestamp()) ELSE r.started_at END,
        available_at = NULL,
        waiting_for = NULL,
        held_by = NULL,
        worker_id = %(worker_id)s,
        updated_at = statement_timestamp()
    FROM chosen
    WHERE r.run_id = chosen.run_id
    RETURNING {qualified_run_columns("r")}, chosen.recovered, chosen.starts
)
SELECT *, statement_timestamp() FROM claimed
"""

# Hold runs back: each with the limit that holds it, and for a rate limit when to look again.
HOLD = """
UPDATE durable_run r SET held_by = h.reason, available_at = h.recheck_at
FROM unnest(%(run_ids)s::text[], %(reasons)s::text[], %(recheck_at)s::timestamptz[]) AS h(run_id, reason, recheck_at)
WHERE r.run_id = h.run_id AND r.status = 'pending'
"""

# Hold every due run of saturated function keys at once (a saturated key's runs then leave the claim
# index together, so runs of other keys queued behind them are not delayed).
HOLD_KEYS = """
UPDATE durable_run r SET held_by = r.concurrency_key, available_at = NULL
WHERE r.run_id IN (
    SELECT d.run_id FROM unnest(%(keys)s::text[]) AS k(key)
    CROSS JOIN LATERAL (
        SELECT run_id FROM durable_run
        WHERE concurrency_key = k.key AND status = 'pending' AND held_by IS NULL
          AND (available_at IS NULL OR available_at <= now())
        ORDER BY priority DESC, created_at
        LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED
    ) d
)
"""

# Release the first runs each freed key holds (their slots are free again), and wake workers.
RELEASE_HELD = f"""
WITH released AS (
    UPDATE durable_run r SET held_by = NULL
    WHERE r.run_id IN (
        SELECT x.run_id FROM unnest(%(reasons)s::text[], %(counts)s::int[]) AS f(reason, n)
        CROSS JOIN LATERAL (
            SELECT run_id FROM durable_run
            WHERE status = 'pending' AND held_by = f.reason
            ORDER BY priority DESC, created_at
            LIMIT f.n
            FOR UPDATE SKIP LOCKED
        ) x
    )
    RETURNING r.queue
), notes AS (
    SELECT pg_notify('{WAKE_CHANNEL}', queue) FROM (SELECT DISTINCT queue FROM released) q
)
SELECT (SELECT count(*) FROM released), (SELECT count(*) FROM notes)
"""

# What a limit key holds back and what runs under it now: a function's or queue's concurrency key
# counts the runs holding its slots, a rate key the runs it limits that are running.
_RUNNING_UNDER = f"""CASE
    WHEN key LIKE '{QUEUE_CONCURRENCY_PREFIX}%%' OR key LIKE 'rate:queue:%%' THEN (
        SELECT count(*) FROM durable_run
        WHERE status = 'running' AND queue = regexp_replace(key, '^(concurrency|rate):queue:', ''))
    WHEN key LIKE 'concurrency:%%' THEN (
        SELECT count(*) FROM durable_run
        WHERE concurrency_key = key AND concurrency_key IS NOT NULL
          AND (status = 'running' OR (concurrency_while_waiting AND started_at IS NOT NULL
                                      AND status = ANY (ARRAY['pending', 'waiting']))))
    ELSE (SELECT count(*) FROM durable_run WHERE status = 'running' AND rate_key = key) END"""

# The keys holding most runs back, each with how many it holds and how many run under it now.
HELD_BY_KEY = f"""
WITH held AS (
    SELECT held_by AS key, count(*) AS held FROM (
        SELECT held_by FROM durable_run WHERE status = 'pending' AND held_by IS NOT NULL
        ORDER BY held_by LIMIT %(cap)s
    ) h
    GROUP BY held_by
    ORDER BY count(*) DESC, held_by
    LIMIT %(keys)s
)
SELECT key, held, {_RUNNING_UNDER} FROM held
"""

# One key's runs held back and runs under it now.
KEY_STATE = f"""
SELECT (SELECT count(*) FROM durable_run WHERE status = 'pending' AND held_by = key), {_RUNNING_UNDER}
FROM (SELECT %(key)s::text AS key) k
"""


@dataclass(frozen=True, slots=True)
class Candidate:
    """A limited run that may be claimed, locked by this transaction, with its limits."""

    run: Run
    concurrency_key: str | None
    concurrency_limit: int | None
    while_waiting: bool
    rate_key: str | None
    rate_limit: int | None
    rate_per: float | None
    recovered: bool
    # It already holds its function key's slot (running, or started with while_waiting): admitting it
    # takes no slot; likewise the queue's for a run still running.
    holds_slot: bool
    holds_queue_slot: bool


@dataclass(frozen=True, slots=True)
class Usage:
    """How much of each limit is in use: held slots per key and queue, starts in the window per rate key."""

    concurrency: dict[str, int]
    queues: dict[str, int]
    # rate key -> (starts in the window, the oldest of them)
    rates: dict[str, tuple[int, datetime | None]]
    # The database's clock when it was counted.
    now: datetime


class Decision(Protocol):
    """What the engine decided for an admission (engine/flow.py builds it)."""

    admitted: list[tuple[Candidate, bool]]
    rate_starts: list[tuple[str, float]]
    held: list[tuple[str, str, datetime | None]]
    saturated: set[str]


@dataclass(frozen=True, slots=True)
class LimitState:
    """A limit key as an operator sees it: the due runs it holds back and the runs under it now."""

    key: str
    held: int
    running: int


@dataclass(frozen=True, slots=True)
class SlotChange:
    """A run's status change, with what decides which limit slots it held before and after."""

    concurrency_key: str | None
    while_waiting: bool
    started: bool
    queue: str
    before: str
    after: str

    def freed(self, concurrency_queues: set[str]) -> list[str]:
        """The slot keys this change gave up."""
        keys = []
        if self.concurrency_key is not None and self._holds(self.before) and not self._holds(self.after):
            keys.append(self.concurrency_key)
        if self.queue in concurrency_queues and self.before == "running" and self.after != "running":
            keys.append(queue_concurrency_reason(self.queue))
        return keys

    def _holds(self, status: str) -> bool:
        return status == "running" or (self.while_waiting and self.started and status in ("pending", "waiting"))


def lock_keys(cur: CursorWrapper, keys: set[str]) -> None:
    if keys:
        cur.execute(LOCK_KEYS, {"keys": sorted(keys)})


def lock_candidates(cur: CursorWrapper, run_ids: list[str]) -> list[Candidate]:
    cur.execute(LOCK_CANDIDATES, {"run_ids": run_ids})
    return [Candidate(row_to_run(row), *row[RUN_COLUMN_COUNT:]) for row in cur.fetchall()]


def usage(cur: CursorWrapper, *, concurrency_keys: set[str], queues: set[str], rates: dict[str, float]) -> Usage:
    """Usage of the given limits, counted now (call it after ``lock_keys``)."""
    cur.execute(
        USAGE,
        {
            "concurrency_keys": sorted(concurrency_keys),
            "queues": sorted(queues),
            "rate_keys": list(rates),
            "rate_pers": list(rates.values()),
        },
    )
    concurrency: dict[str, int] = {}
    queue_usage: dict[str, int] = {}
    rate_usage: dict[str, tuple[int, datetime | None]] = {}
    now: datetime | None = None
    for kind, key, count, moment in cur.fetchall():
        if kind == "concurrency":
            concurrency[key] = count
        elif kind == "queue":
            queue_usage[key] = count
        elif kind == "rate":
            rate_usage[key] = (count, moment)
        else:
            now = moment
    assert now is not None  # the statement always ends with the clock's row
    return Usage(concurrency=concurrency, queues=queue_usage, rates=rate_usage, now=now)


def admit(
    run_ids: list[str],
    *,
    keys: set[str],
    queue_limits: dict[str, QueueLimits],
    decide: Callable[[list[Candidate], Usage, datetime], Decision],
    lease_seconds: float,
    worker_id: str,
    hold_batch: int,
    rate_window_guard: float,
) -> list[tuple[Run, bool, bool, Any]]:
    """One admission, in a transaction of its own: lock the keys, then the candidates, count, let the engine
    decide, claim what it admits and hold the rest. Rate windows are counted ``rate_window_guard`` times
    their length (see engine/flow.py).

    Returns:
        (run, recovered, started, database now) of each run claimed.
    """

    def work() -> list[tuple[Run, bool, bool, Any]]:
        with cursor() as cur:
            lock_keys(cur, keys)
            candidates = lock_candidates(cur, run_ids)
            if not candidates:
                return []
            found = usage(
                cur,
                concurrency_keys={c.concurrency_key for c in candidates if c.concurrency_key is not None},
                queues={queue for queue, limits in queue_limits.items() if limits.concurrency is not None},
                rates={
                    **{
                        c.rate_key: c.rate_per * rate_window_guard
                        for c in candidates
                        if c.rate_key is not None and c.rate_per is not None
                    },
                    **{
                        queue_rate_reason(queue): limits.rate[1] * rate_window_guard
                        for queue, limits in queue_limits.items()
                        if limits.rate is not None
                    },
                },
            )
            decision = decide(candidates, found, found.now)
            claimed = (
                claim(cur, decision.admitted, decision.rate_starts, lease_seconds=lease_seconds, worker_id=worker_id)
                if decision.admitted
                else []
            )
            hold(cur, decision.held)
            hold_saturated_keys(cur, decision.saturated, limit=hold_batch)
            return claimed

    return in_transaction(work)


def release_slots(cur: CursorWrapper, changes: list[SlotChange]) -> None:
    """After runs gave up limit slots (in this transaction): release as many held runs, under the keys' locks."""
    concurrency_queues = {q for q, limits in configured_queue_limits().items() if limits.concurrency is not None}
    freed: dict[str, int] = {}
    for change in changes:
        for key in change.freed(concurrency_queues):
            freed[key] = freed.get(key, 0) + 1
    if freed:
        lock_keys(cur, set(freed))
        release_held(cur, freed)


def claim(
    cur: CursorWrapper,
    admitted: list[tuple[Candidate, bool]],
    rate_starts: list[tuple[str, float]],
    *,
    lease_seconds: float,
    worker_id: str,
) -> list[tuple[Run, bool, bool, Any]]:
    """Claim admitted candidates ((candidate, starts now)); returns (run, recovered, started, database now)."""
    cur.execute(
        CLAIM,
        {
            "run_ids": [c.run.run_id for c, _ in admitted],
            "starts": [starts for _, starts in admitted],
            "recovered": [c.recovered for c, _ in admitted],
            "rate_keys": [key for key, _ in rate_starts],
            "rate_pers": [per for _, per in rate_starts],
            "lease": lease_seconds,
            "worker_id": worker_id,
        },
    )
    return [(row_to_run(row), *row[RUN_COLUMN_COUNT : RUN_COLUMN_COUNT + 3]) for row in cur.fetchall()]


def hold(cur: CursorWrapper, held: list[tuple[str, str, datetime | None]]) -> None:
    """Hold runs back: (run_id, the limit that holds it, when to look again or None)."""
    if held:
        cur.execute(
            HOLD,
            {
                "run_ids": [r for r, _, _ in held],
                "reasons": [h for _, h, _ in held],
                "recheck_at": [t for _, _, t in held],
            },
        )


def hold_saturated_keys(cur: CursorWrapper, keys: set[str], *, limit: int) -> None:
    """Hold the due runs (up to ``limit`` per key) of function keys whose every slot is taken."""
    if keys:
        cur.execute(HOLD_KEYS, {"keys": sorted(keys), "limit": limit})


def release_held(cur: CursorWrapper, freed: dict[str, int]) -> int:
    """Release, for each limit key, as many held runs as slots it freed (call it after ``lock_keys``).

    Returns:
        How many runs were released.
    """
    if not freed:
        return 0
    cur.execute(RELEASE_HELD, {"reasons": list(freed), "counts": list(freed.values())})
    released: int = cur.fetchone()[0]
    return released


def held_by_key(*, cap: int = 10_000, keys: int = 20) -> list[LimitState]:
    """The keys holding most runs back, most first; at most ``keys`` of them.

    At most ``cap`` held runs are read (a key's count is then a floor), so it
    costs the same whatever the table holds.
    """
    with cursor() as cur:
        cur.execute(HELD_BY_KEY, {"cap": cap, "keys": keys})
        return [LimitState(key, held, running) for key, held, running in cur.fetchall()]


def key_state(key: str) -> LimitState:
    """How many runs ``key`` holds back and how many run under it now."""
    with cursor() as cur:
        cur.execute(KEY_STATE, {"key": key})
        held, running = cur.fetchone()
    return LimitState(key, held, running)
