"""Statements behind the health check, the workers page and the runs gauge, each bounded whatever the table holds.

Pending runs are read per (function, version) pair: a skip scan of the
``durable_run_pending_versions`` index finds the pairs (one probe each) and two
more probes per pair find since when its oldest run is due. Runs by status and
queue are counted exactly through the partial index of each live status up to a
cap, and otherwise taken from PostgreSQL's statistics (``durable_run_status_queue``):
nothing here counts a large table.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from ..states import LIVE_STATUSES
from .db import cursor

# The most (function, version) pairs read; each costs a few index probes.
MAX_PAIRS = 1000
# Due waits examined for their (function, version): in claim order, so a wait nobody can run is seen first.
MAX_DUE_WAITS = 1000
# Runs of a live status counted exactly; beyond it the gauge takes PostgreSQL's estimate.
EXACT_UP_TO = 10_000

# A pending run held back by a concurrency or rate limit is due but not late.
NOT_HELD = "AND held_by IS NULL"

# Registered by a live worker: one seen within %(within)s seconds that did not stop.
_REGISTERED = """
EXISTS (SELECT 1 FROM durable_worker w
        WHERE w.stopped_at IS NULL AND w.last_seen_at >= now() - make_interval(secs => %(within)s::float8)
          AND w.functions -> {alias}.name @> to_jsonb({alias}.version))
"""

# Every (function, version) pair with pending runs: the oldest due run of each (not held by a limit), since
# when it is due (its delay or backoff ended, or it became pending), and whether a live worker registers the pair.
PENDING_PAIRS = f"""
WITH RECURSIVE pairs AS (
    (SELECT name, version FROM durable_run WHERE status = 'pending' ORDER BY name, version LIMIT 1)
    UNION ALL
    SELECT next.name, next.version FROM pairs p CROSS JOIN LATERAL (
        SELECT name, version FROM durable_run
        WHERE status = 'pending' AND (name, version) > (p.name, p.version)
        ORDER BY name, version
        LIMIT 1
    ) next
), listed AS (
    SELECT name, version FROM pairs LIMIT %(max_pairs)s
)
SELECT p.name, p.version, oldest.run_id, oldest.due_since, now(), {_REGISTERED.format(alias="p")}
FROM listed p
LEFT JOIN LATERAL (
    SELECT run_id, due_since FROM (
        (SELECT run_id, updated_at AS due_since FROM durable_run
         WHERE status = 'pending' AND name = p.name AND version = p.version AND available_at IS NULL {NOT_HELD}
         ORDER BY available_at, updated_at
         LIMIT 1)
        UNION ALL
        (SELECT run_id, available_at FROM durable_run
         WHERE status = 'pending' AND name = p.name AND version = p.version AND available_at <= now() {NOT_HELD}
         ORDER BY available_at
         LIMIT 1)
    ) due
    ORDER BY due_since
    LIMIT 1
) oldest ON true
ORDER BY p.name, p.version
"""

# The (function, version) pairs of the waits whose deadline passed, in claim order and capped, and whether a
# live worker registers each.
DUE_WAIT_PAIRS = f"""
SELECT DISTINCT d.name, d.version, {_REGISTERED.format(alias="d")}
FROM (SELECT name, version FROM durable_run WHERE status = 'waiting' AND available_at <= now()
      ORDER BY available_at LIMIT %(max_due_waits)s) d
"""

# How many runs of one live status are in each queue, reading at most %(cap)s + 1 of them in the order of an
# index that holds every run of the status (the claim's index leaves held runs out: pending ones go by
# (status, name, created_at)).
_LIVE_ORDER = {"pending": "name, created_at", "running": "leased_until", "waiting": "run_id"}
LIVE_BY_QUEUE = {
    status: f"""
SELECT queue, count(*) FROM (
    SELECT queue FROM durable_run WHERE status = '{status}' ORDER BY {order} LIMIT %(cap)s + 1
) live GROUP BY queue
"""
    for status, order in _LIVE_ORDER.items()
}

# The server answers, and which it is.
SERVER_VERSION = "SELECT current_setting('server_version')"

# Parked runs (their last allowed attempt failed; they wait for an operator), through their partial index.
PARKED = "SELECT count(*) FROM durable_run WHERE status = 'waiting' AND parked_at IS NOT NULL"

# PostgreSQL's estimate of the runs in each (status, queue), from the extended statistics the migrations create
# (empty until the table was first analyzed).
ESTIMATED_BY_STATUS_AND_QUEUE = """
SELECT s.most_common_vals[i][1], s.most_common_vals[i][2], round(s.most_common_freqs[i] * greatest(c.reltuples, 0))
FROM pg_stats_ext s
JOIN pg_class c ON c.oid = to_regclass('durable_run')
CROSS JOIN LATERAL generate_subscripts(s.most_common_vals, 1) AS i
WHERE s.statistics_name = 'durable_run_status_queue' AND s.schemaname = current_schema()
"""


@dataclass(frozen=True, slots=True, kw_only=True)
class PendingPair:
    """Pending runs of one (function, version): the oldest due one, and whether a live worker registers it."""

    name: str
    version: int
    # The oldest due run not held by a limit, and since when it is due (None: none is due).
    oldest_run_id: str | None
    due_since: datetime | None
    # The database's clock.
    now: datetime
    registered: bool

    @property
    def waited_seconds(self) -> float | None:
        """How long its oldest due run has waited to be claimed."""
        return None if self.due_since is None else max((self.now - self.due_since).total_seconds(), 0.0)


def parked_runs() -> int:
    with cursor() as cur:
        cur.execute(PARKED)
        count: int = cur.fetchone()[0]
        return count


def server_version() -> str:
    """PostgreSQL's version, read from the durable database (which connects if it has to)."""
    with cursor() as cur:
        cur.execute(SERVER_VERSION)
        version: str = cur.fetchone()[0]
        return version


def pending_pairs(*, live_within: float) -> list[PendingPair]:
    """Every (function, version) with pending runs (at most MAX_PAIRS), by name and version.

    Args:
        live_within: a worker seen within this many seconds (and not stopped) is live.
    """
    with cursor() as cur:
        cur.execute(PENDING_PAIRS, {"max_pairs": MAX_PAIRS, "within": live_within})
        rows = cur.fetchall()
    return [
        PendingPair(name=name, version=version, oldest_run_id=run_id, due_since=due_since, now=now, registered=known)
        for name, version, run_id, due_since, now, known in rows
    ]


def due_wait_pairs(*, live_within: float) -> list[tuple[str, int, bool]]:
    """(function, version, registered by a live worker) of waits whose deadline passed (at most MAX_DUE_WAITS)."""
    with cursor() as cur:
        cur.execute(DUE_WAIT_PAIRS, {"max_due_waits": MAX_DUE_WAITS, "within": live_within})
        rows: list[tuple[str, int, bool]] = cur.fetchall()
        return rows


def runs_by_status_and_queue(*, exact_up_to: int = EXACT_UP_TO) -> dict[tuple[str, str], int]:
    """Runs per (status, queue): exact for a live status with at most ``exact_up_to`` runs, else estimated.

    Finished runs are always estimated: they are the bulk of a large table.
    """
    counts: dict[tuple[str, str], int] = {}
    estimated_statuses = set()
    with cursor() as cur:
        for status in sorted(LIVE_STATUSES):
            cur.execute(LIVE_BY_QUEUE[status], {"cap": exact_up_to})
            rows = cur.fetchall()
            if sum(count for _, count in rows) > exact_up_to:
                estimated_statuses.add(status)
                continue
            counts.update(((status, queue), count) for queue, count in rows)
        cur.execute(ESTIMATED_BY_STATUS_AND_QUEUE)
        for status, queue, estimate in cur.fetchall():
            if status not in LIVE_STATUSES or status in estimated_statuses:
                counts[(status, queue)] = int(estimate)
    return counts
