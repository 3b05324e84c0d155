"""Retention: delete whole finished trees, their steps, signals, events and streams, in bounded batches.

A batch first locks the members of candidate trees (skipping rows another
transaction holds: that tree waits for a later purge), then deletes in a
second statement, whose snapshot sees everything committed before the locks
were taken: a signal emitted while we waited for its run's lock goes with the run.

Workers' periodic purges take turns with a transaction-level advisory lock that
each batch takes first: it ends with the batch's transaction, so no session
state is left behind (a session lock taken through a transaction pooler stays
with whichever server session ran it, and the unlock may reach another).
"""

from __future__ import annotations

from datetime import datetime

from .db import cursor, in_transaction

# Whole finished trees whose every member landed before the cutoff, oldest root landings
# first after a keyset position: each candidate member locked, with its tree's size.
LOCK_BATCH = """
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
    -- Re-read each member as it is locked: a resume may have just made one live again.
    SELECT tree.root, d.run_id FROM durable_run d JOIN tree USING (run_id)
    WHERE tree.root NOT IN (SELECT root FROM blocked)
      AND d.status IN ('succeeded', 'failed', 'cancelled') AND d.updated_at < %(cutoff)s
    FOR UPDATE OF d SKIP LOCKED
),
members AS (SELECT root, count(*) AS total FROM tree GROUP BY root),
held AS (SELECT root, count(*) AS total, array_agg(run_id) AS run_ids FROM locked GROUP BY root)
SELECT (SELECT coalesce(array_agg(run_id), '{}') FROM (
            SELECT unnest(held.run_ids) AS run_id FROM held JOIN members USING (root)
            WHERE held.total = members.total) whole),
       (SELECT updated_at FROM candidates ORDER BY updated_at DESC, run_id DESC LIMIT 1),
       (SELECT run_id FROM candidates ORDER BY updated_at DESC, run_id DESC LIMIT 1)
"""

# Delete locked finished trees with their journal, signals, attempts, events and streams, schedule records
# and divergence notes (a statement after the locks).
DELETE_RUNS = """
WITH steps AS (DELETE FROM durable_step WHERE run_id = ANY(%(run_ids)s::text[])),
signals AS (DELETE FROM durable_signal WHERE run_id = ANY(%(run_ids)s::text[])),
events AS (DELETE FROM durable_event WHERE run_id = ANY(%(run_ids)s::text[])),
streams AS (DELETE FROM durable_stream WHERE run_id = ANY(%(run_ids)s::text[])),
items AS (DELETE FROM durable_stream_item WHERE run_id = ANY(%(run_ids)s::text[])),
attempts AS (DELETE FROM durable_attempt WHERE run_id = ANY(%(run_ids)s::text[])),
schedule_runs AS (DELETE FROM durable_schedule_run WHERE run_id = ANY(%(run_ids)s::text[])),
divergences AS (DELETE FROM durable_replay_divergence WHERE run_id = ANY(%(run_ids)s::text[])),
deleted AS (DELETE FROM durable_run WHERE run_id = ANY(%(run_ids)s::text[]) RETURNING 1)
SELECT count(*) FROM deleted
"""

# The periodic purge's turn, held until the batch's transaction ends; another worker holding it skips its purge.
TRY_TURN = "SELECT pg_try_advisory_xact_lock(hashtext('durable_django.purge'))"

_EPOCH = datetime.fromisoformat("1970-01-01T00:00:00+00:00")


def purge_batch(
    cutoff: datetime, limit: int, after: tuple[datetime, str] | None
) -> tuple[int, tuple[datetime, str] | None]:
    """Delete one batch of whole finished trees; returns (runs deleted, keyset position or None)."""
    return in_transaction(_delete_batch, cutoff, limit, after)


def purge_batch_in_turn(
    cutoff: datetime, limit: int, after: tuple[datetime, str] | None
) -> tuple[int, tuple[datetime, str] | None] | None:
    """The worker's periodic purge batch: as ``purge_batch``, or None (nothing deleted) while another
    worker's batch holds the turn."""

    def work() -> tuple[int, tuple[datetime, str] | None] | None:
        with cursor() as cur:
            cur.execute(TRY_TURN)
            if not cur.fetchone()[0]:
                return None
        return _delete_batch(cutoff, limit, after)

    return in_transaction(work)


def _delete_batch(
    cutoff: datetime, limit: int, after: tuple[datetime, str] | None
) -> tuple[int, tuple[datetime, str] | None]:
    after_at, after_id = after or (_EPOCH, "")
    with cursor() as cur:
        cur.execute(LOCK_BATCH, {"cutoff": cutoff, "limit": limit, "after_at": after_at, "after_id": after_id})
        doomed, last_at, last_id = cur.fetchone()
        deleted: int = 0
        if doomed:
            cur.execute(DELETE_RUNS, {"run_ids": doomed})
            deleted = cur.fetchone()[0]
    return deleted, (None if last_at is None else (last_at, last_id))
