"""Leases: what keeps a held run its holder's, renewed in a way no client transaction can block.

A lease is the run row's ``leased_until``, renewed by its holder's heartbeat.
A client call that writes a running run (``emit_signal``, ``cancel``, an
operator's action, a read that locks) holds the row's lock until its caller
commits, which may be long after a lease (a slow view under
``ATOMIC_REQUESTS``); the heartbeat never waits for that lock (it would stall
every other renewal), so it renews such a run's lease in
``durable_lease_renewal`` instead, a table no client locks. A lease is live
while either instant is ahead (``LIVE_RENEWAL``): the claim, the next-due
query and the reconciler count both, so a client transaction of any length
takes no lease from a live holder. The renewal row goes as soon as the
heartbeat renews the row itself again, or the reconciler finds it expired.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .db import cursor

# The run (``{run}``, an alias or the table's name) has a renewal of its current attempt's lease still ahead.
LIVE_RENEWAL = """EXISTS (SELECT 1 FROM durable_lease_renewal k
    WHERE k.run_id = {run}.run_id AND k.token = {run}.attempts AND k.leased_until >= now())"""

# How far a renewal reaches: a lease from now, and never more than a lease past the attempt's timeout (from
# its start). The holder alone ends an attempt at its timeout, on its own clock: it has a lease's time to
# land the timeout before any other worker may take the run, and a holder that can no longer end it loses
# the run a lease after its timeout.
_RENEWED_UNTIL = """least(now() + make_interval(secs => %(lease)s::float8),
                          {started} + make_interval(secs => {timeout} + %(lease)s::float8))"""

# Renew the leases of held runs, carrying each one's cancel flag back. A run whose row another transaction
# has locked right now is renewed in durable_lease_renewal (its row is left alone); one that is no longer
# this holder's is reported lost. A renewal on the row drops the run's row in durable_lease_renewal (a
# stale holder's beat drops only its own attempt's, or an older one's, never its successor's).
HEARTBEAT = f"""
WITH held AS (
    SELECT * FROM unnest(%(run_ids)s::text[], %(tokens)s::int[], %(timeouts)s::float8[]) AS h(run_id, token, timeout)
),
still AS (
    SELECT r.run_id, r.attempts AS token, r.attempt_started_at, held.timeout,
           r.cancel_requested_at IS NOT NULL AND r.pivoted_at IS NULL AS cancel
    FROM durable_run r JOIN held ON r.run_id = held.run_id AND r.attempts = held.token
    WHERE r.status = 'running'
),
mine AS (
    SELECT r.run_id, held.timeout FROM durable_run r JOIN held ON r.run_id = held.run_id AND r.attempts = held.token
    WHERE r.status = 'running'
    FOR NO KEY UPDATE OF r SKIP LOCKED
),
renewed AS (
    UPDATE durable_run r
    SET leased_until = {_RENEWED_UNTIL.format(started="r.attempt_started_at", timeout="mine.timeout")}
    FROM mine WHERE r.run_id = mine.run_id
    RETURNING r.run_id, r.attempts AS token, r.cancel_requested_at IS NOT NULL AND r.pivoted_at IS NULL AS cancel
),
busy AS (
    SELECT still.* FROM still WHERE NOT EXISTS (SELECT 1 FROM renewed WHERE renewed.run_id = still.run_id)
),
kept AS (
    INSERT INTO durable_lease_renewal (run_id, token, leased_until)
    SELECT busy.run_id, busy.token, {_RENEWED_UNTIL.format(started="busy.attempt_started_at", timeout="busy.timeout")}
    FROM busy
    ON CONFLICT (run_id) DO UPDATE SET token = excluded.token, leased_until = excluded.leased_until
    RETURNING run_id, token
),
settled AS (
    DELETE FROM durable_lease_renewal k USING held
    WHERE k.run_id = held.run_id AND k.token <= held.token
      AND NOT EXISTS (SELECT 1 FROM busy WHERE busy.run_id = held.run_id)
)
SELECT held.run_id, held.token, renewed.run_id IS NOT NULL OR kept.run_id IS NOT NULL,
       coalesce(renewed.cancel, busy.cancel, false), still.run_id IS NOT NULL
FROM held
LEFT JOIN still ON still.run_id = held.run_id AND still.token = held.token
LEFT JOIN renewed ON renewed.run_id = held.run_id AND renewed.token = held.token
LEFT JOIN busy ON busy.run_id = held.run_id AND busy.token = held.token
LEFT JOIN kept ON kept.run_id = held.run_id AND kept.token = held.token
"""

# Renewals that have run out (their holder died, or its run ended while locked), a bounded batch at a time.
DELETE_EXPIRED = """
DELETE FROM durable_lease_renewal WHERE run_id IN (
    SELECT run_id FROM durable_lease_renewal WHERE leased_until < now() ORDER BY leased_until LIMIT %(limit)s)
"""


@dataclass(frozen=True, slots=True)
class Renewal:
    """What a heartbeat learned of one held run."""

    # The lease was extended (on the run's row, or beside it while another transaction had the row locked).
    renewed: bool
    # A cancel was requested (and no pivot step was journalled).
    cancel_requested: bool
    # The run is still this holder's.
    held: bool


def heartbeat(
    held: list[tuple[str, int]], lease_seconds: float, *, timeouts: list[float | None] | None = None
) -> dict[tuple[str, int], Renewal]:
    """Extend the leases of (run_id, token) pairs, each never more than a lease past its attempt's timeout
    (seconds from the attempt's start; None: no limit); one Renewal per pair."""
    if not held:
        return {}
    params: dict[str, Any] = {
        "lease": lease_seconds,
        "timeouts": timeouts or [None] * len(held),
        "run_ids": [run_id for run_id, _ in held],
        "tokens": [token for _, token in held],
    }
    with cursor() as cur:
        cur.execute(HEARTBEAT, params)
        return {
            (run_id, token): Renewal(renewed, cancel, still_held)
            for run_id, token, renewed, cancel, still_held in cur.fetchall()
        }


def delete_expired(limit: int) -> int:
    with cursor() as cur:
        cur.execute(DELETE_EXPIRED, {"limit": limit})
        deleted: int = cur.rowcount
    return deleted
