"""Statements behind the operator's views: the runs overview and the tenants the admin offers.

Each one is bounded however large durable_run grows: windows are read through
the listing and purge indexes and capped, the oldest pending run is one probe of
the claim index per priority, and tenants come from a skip scan of the tenant
index. Nothing here counts the whole table.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from ..states import MAX_PRIORITY, MIN_PRIORITY, RunStatus
from .db import TERMINAL, cursor

# At most this many runs are read per window; beyond it counts are shown as a floor.
OVERVIEW_CAP = 100_000

# Runs created in the last day, by status, with the last hour apart: one pass over the newest entries of the
# listing index, which carries each run's status (an index-only scan), stopping at the cap.
WINDOW_COUNTS = """
SELECT status, count(*) FILTER (WHERE created_at >= now() - interval '1 hour'), count(*)
FROM (
    SELECT status, created_at FROM durable_run
    WHERE created_at >= now() - interval '1 day'
    ORDER BY created_at DESC, run_id DESC
    LIMIT %(cap)s
) recent
GROUP BY status
"""

# Runs that landed in the last hour (the purge index: status, then landing time), capped.
LANDED_LAST_HOUR = """
SELECT count(*) FROM (
    SELECT 1 FROM durable_run
    WHERE status = ANY(%(terminal)s::text[]) AND updated_at >= now() - interval '1 hour'
    LIMIT %(cap)s
) landed
"""

# Parked runs (their retries ran out; they wait for an operator), counted up to the cap through their partial index.
PARKED = """
SELECT count(*) FROM (
    SELECT 1 FROM durable_run WHERE status = 'waiting' AND parked_at IS NOT NULL LIMIT %(cap)s) parked
"""

# The oldest pending run that is due and no limit holds: one probe of the claim index (priority, created_at)
# per priority, reading past the runs not due yet (a delay or a retry's backoff) as the claim does.
OLDEST_PENDING = """
SELECT oldest.run_id, oldest.created_at, now()
FROM generate_series(%(min_priority)s::int, %(max_priority)s::int) AS p(priority)
CROSS JOIN LATERAL (
    SELECT run_id, created_at FROM durable_run
    WHERE status = 'pending' AND held_by IS NULL AND priority = p.priority
      AND (available_at IS NULL OR available_at <= now())
    ORDER BY created_at
    LIMIT 1
) oldest
ORDER BY oldest.created_at
LIMIT 1
"""

# The database clock, for the overview's ages when no run is pending.
DATABASE_NOW = "SELECT now()"

# Distinct tenants in id order, by a skip scan of the index led by tenant_id.
KNOWN_TENANTS = """
WITH RECURSIVE tenants AS (
    (SELECT tenant_id FROM durable_run WHERE tenant_id IS NOT NULL ORDER BY tenant_id LIMIT 1)
    UNION ALL
    SELECT (SELECT r.tenant_id FROM durable_run r WHERE r.tenant_id > t.tenant_id ORDER BY r.tenant_id LIMIT 1)
    FROM tenants t
    WHERE t.tenant_id IS NOT NULL
)
SELECT tenant_id::text FROM tenants WHERE tenant_id IS NOT NULL LIMIT %(limit)s
"""


@dataclass(frozen=True, slots=True, kw_only=True)
class WindowCounts:
    """Runs created in a window, by status; ``capped`` means the counts are a floor."""

    window: str
    by_status: dict[str, int] = field(default_factory=dict)
    capped: bool = False

    @property
    def total(self) -> int:
        return sum(self.by_status.values())


@dataclass(frozen=True, slots=True, kw_only=True)
class Overview:
    """What the top of the runs listing shows, as the database saw it at ``as_of``."""

    as_of: datetime
    last_hour: WindowCounts
    last_day: WindowCounts
    # Runs created and runs landed per minute over the last hour.
    created_per_minute: float
    landed_per_minute: float
    landed_capped: bool
    oldest_pending_run_id: str | None
    oldest_pending_created_at: datetime | None
    # Runs parked for an operator (at most the cap).
    parked: int = 0

    @property
    def oldest_pending_age(self) -> timedelta | None:
        if self.oldest_pending_created_at is None:
            return None
        return max(self.as_of - self.oldest_pending_created_at, timedelta(0))


def overview(*, cap: int = OVERVIEW_CAP, using: str | None = None) -> Overview:
    """Counts by status for the last hour and day, the oldest pending run and throughput.

    Args:
        cap: the most runs read per window; larger windows report ``capped``.
        using: the alias to read from (a replica); the durable alias by default.

    Returns:
        An :class:`Overview`.
    """
    hour: dict[str, int] = {}
    day: dict[str, int] = {}
    with cursor(using) as cur:
        cur.execute(WINDOW_COUNTS, {"cap": cap})
        for status, in_hour, in_day in cur.fetchall():
            if in_hour:
                hour[status] = in_hour
            day[status] = in_day
        cur.execute(LANDED_LAST_HOUR, {"terminal": list(TERMINAL), "cap": cap})
        landed = cur.fetchone()[0]
        cur.execute(PARKED, {"cap": cap})
        parked = cur.fetchone()[0]
        cur.execute(OLDEST_PENDING, {"min_priority": MIN_PRIORITY, "max_priority": MAX_PRIORITY})
        row = cur.fetchone()
        if row is None:
            cur.execute(DATABASE_NOW)
            row = (None, None, cur.fetchone()[0])
    # The window read ``cap`` runs: there may be more. The hour filled it too when every run read was in the hour.
    examined = sum(day.values())
    day_capped = examined >= cap
    hour_filled = sum(hour.values()) == examined
    order = {status: index for index, status in enumerate(RunStatus.values)}

    def ordered(counts: dict[str, int]) -> dict[str, int]:
        return dict(sorted(counts.items(), key=lambda item: order.get(item[0], len(order))))

    last_hour = WindowCounts(window="last hour", by_status=ordered(hour), capped=day_capped and hour_filled)
    return Overview(
        as_of=row[2],
        last_hour=last_hour,
        last_day=WindowCounts(window="last day", by_status=ordered(day), capped=day_capped),
        created_per_minute=last_hour.total / 60,
        landed_per_minute=landed / 60,
        landed_capped=landed >= cap,
        oldest_pending_run_id=row[0],
        oldest_pending_created_at=row[1],
        parked=parked,
    )


def known_tenants(*, limit: int = 1000, using: str | None = None) -> list[str]:
    """Tenant ids that own at least one run, in id order, at most ``limit`` of them.

    Args:
        limit: how many tenants to return; each costs one index probe.
        using: the alias to read from (a replica); the durable alias by default.

    Returns:
        Tenant ids as canonical UUID text.
    """
    with cursor(using) as cur:
        cur.execute(KNOWN_TENANTS, {"limit": limit})
        return [tenant for (tenant,) in cur.fetchall()]
