"""Statements on durable_step: reading the journal and writing steps, alone or several slots' at once.

Each worker write here is fenced on the claim token; a journal write is
first-committed-wins (``ON CONFLICT DO NOTHING``) and the loser reads the winner.
The held run's lock and the journal insert that suspensions (``waits``) and
spawns (``spawns``) make inside their transaction are here too.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from django.db import transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorWrapper

from ..exceptions import LeaseLost
from ..storable import json_text
from .db import connection, cursor, cursor_on, fetch_one, from_json

# Every journal entry of some runs.
SELECT_JOURNAL = "SELECT run_id, step_id, result::text FROM durable_step WHERE run_id = ANY(%s)"

# An entry's id (``s.step_id``) for version %(version)s: the text after the version prefix kept.
REKEYED_STEP_ID = "'v' || %(version)s::int || substr(s.step_id, strpos(s.step_id, ':'))"

# Re-key a run's journal to another version (a resume on it); an entry that version wrote already (an
# earlier stint on it) keeps its own value.
REKEY_JOURNAL = f"""
UPDATE durable_step s SET step_id = {REKEYED_STEP_ID}
WHERE s.run_id = %(run_id)s AND s.step_id <> {REKEYED_STEP_ID}
  AND NOT EXISTS (SELECT FROM durable_step t WHERE t.run_id = s.run_id AND t.step_id = {REKEYED_STEP_ID})
"""

# One journal entry.
SELECT_STEP = "SELECT result::text FROM durable_step WHERE run_id = %s AND step_id = %s"

# When a step's fn started and how long it ran, from its duration in seconds (its value is journalled as
# soon as fn returns, so it started that long before this statement, by the database's clock).
_TIMED = "now() - make_interval(secs => %(duration)s::float8), make_interval(secs => %(duration)s::float8)"

# Journal a step under the fence (first committed value wins); a pivot step also marks the run.
RECORD_STEP = f"""
WITH fence AS (
    SELECT run_id, tenant_id, cancel_requested_at IS NOT NULL AND pivoted_at IS NULL AS cancel
    FROM durable_run
    WHERE run_id = %(run_id)s AND attempts = %(token)s AND status = 'running'
    FOR SHARE
), inserted AS (
    INSERT INTO durable_step (run_id, step_id, result, tenant_id, created_at, started_at, duration)
    SELECT run_id, %(step_id)s, %(result)s::jsonb, tenant_id, now(), {_TIMED} FROM fence
    ON CONFLICT (run_id, step_id) DO NOTHING
    RETURNING result
), pivot AS (
    UPDATE durable_run SET pivoted_at = coalesce(pivoted_at, now()),
        cancel_refused_at = CASE WHEN cancel_requested_at IS NOT NULL
                                 THEN coalesce(cancel_refused_at, now()) ELSE cancel_refused_at END
    WHERE %(pivot)s AND run_id IN (SELECT run_id FROM fence)
    RETURNING run_id
)
SELECT (SELECT cancel FROM fence), (SELECT result::text FROM inserted), (SELECT count(*) FROM pivot)
"""

# Journal a step (not a pivot) under the fence in one statement: a row when this statement stored it
# (the value as stored, and the run's cancel flag), none when the fence refused it or an entry was
# there already (RECORD_STEP then tells which).
RECORD_STEP_ALONE = f"""
INSERT INTO durable_step (run_id, step_id, result, tenant_id, created_at, started_at, duration)
SELECT run_id, %(step_id)s, %(result)s::jsonb, tenant_id, now(), {_TIMED} FROM durable_run
WHERE run_id = %(run_id)s AND attempts = %(token)s AND status = 'running'
FOR SHARE
ON CONFLICT (run_id, step_id) DO NOTHING
RETURNING result::text,
    (SELECT cancel_requested_at IS NOT NULL AND pivoted_at IS NULL FROM durable_run WHERE run_id = %(run_id)s)
"""

# Journal the steps several slots asked for at once, each under its own fence, in one statement. A
# run another transaction has locked is skipped rather than waited for; a step this statement did not
# store (locked, fenced off, or there already) gets no value, and RECORD_STEP decides it alone.
RECORD_STEPS = """
WITH given AS (
    SELECT * FROM unnest(%(run_ids)s::text[], %(tokens)s::int[], %(step_ids)s::text[], %(results)s::text[],
                         %(durations)s::float8[])
        WITH ORDINALITY AS g(run_id, token, step_id, result, duration, n)
), fence AS (
    SELECT r.run_id, r.attempts, r.tenant_id, r.cancel_requested_at IS NOT NULL AND r.pivoted_at IS NULL AS cancel
    FROM durable_run r
    WHERE (r.run_id, r.attempts) IN (SELECT run_id, token FROM given) AND r.status = 'running'
    FOR SHARE OF r SKIP LOCKED
), inserted AS (
    INSERT INTO durable_step (run_id, step_id, result, tenant_id, created_at, started_at, duration)
    SELECT given.run_id, given.step_id, given.result::jsonb, fence.tenant_id, now(),
           now() - make_interval(secs => given.duration), make_interval(secs => given.duration)
    FROM given JOIN fence ON fence.run_id = given.run_id AND fence.attempts = given.token
    ORDER BY given.n
    ON CONFLICT (run_id, step_id) DO NOTHING
    RETURNING run_id, step_id, result::text AS result
)
SELECT inserted.result, coalesce(fence.cancel, false)
FROM given
LEFT JOIN fence ON fence.run_id = given.run_id AND fence.attempts = given.token
LEFT JOIN inserted ON fence.run_id IS NOT NULL AND inserted.run_id = given.run_id AND inserted.step_id = given.step_id
ORDER BY given.n
"""

# Lock the held run for a suspension or a spawn; read its cancel flag and tenant.
LOCK_HELD = """
SELECT cancel_requested_at IS NOT NULL AND pivoted_at IS NULL, tenant_id::text FROM durable_run
WHERE run_id = %(run_id)s AND attempts = %(token)s AND status = 'running'
FOR UPDATE
"""

# Journal an entry (first committed value wins) inside a held transaction.
INSERT_STEP = """
INSERT INTO durable_step (run_id, step_id, result, tenant_id, created_at)
VALUES (%(run_id)s, %(step_id)s, %(result)s::jsonb, %(tenant_id)s, now())
ON CONFLICT (run_id, step_id) DO NOTHING
"""


# The records of a step's write are named tuples, not frozen dataclasses: every step makes three, and a
# tuple is made in a third of the time.


class Recorded(NamedTuple):
    value: Any
    cancel_requested: bool


def load_journal(run_ids: list[str]) -> dict[str, dict[str, Any]]:
    journals: dict[str, dict[str, Any]] = {run_id: {} for run_id in run_ids}
    if not run_ids:
        return journals
    with cursor() as cur:
        cur.execute(SELECT_JOURNAL, [list(run_ids)])
        for run_id, step_id, result in cur.fetchall():
            journals[run_id][step_id] = from_json(result)
    return journals


def stored_step(cur: CursorWrapper, run_id: str, step_id: str) -> tuple[Any] | None:
    """The journalled value of a step, as a 1-tuple (a stored JSON null is ``(None,)``), or None."""
    cur.execute(SELECT_STEP, [run_id, step_id])
    row = cur.fetchone()
    return None if row is None else (from_json(row[0]),)


def record_step(
    run_id: str, token: int, step_id: str, result_json: str, *, pivot: bool, duration: float | None = None
) -> Recorded:
    """Journal a step whose fn ran ``duration`` seconds; returns the stored value (ours, or an earlier writer's)."""
    with cursor() as cur:
        cur.execute(
            RECORD_STEP,
            {
                "run_id": run_id,
                "token": token,
                "step_id": step_id,
                "result": result_json,
                "pivot": pivot,
                "duration": duration,
            },
        )
        cancel, inserted, pivoted = cur.fetchone()
        if cancel is None:
            raise LeaseLost()
        if inserted is not None:
            return Recorded(from_json(inserted), bool(cancel) and not pivoted)
        stored = stored_step(cur, run_id, step_id)
    assert stored is not None, "the insert conflicted with this very entry, so it is stored"
    return Recorded(stored[0], bool(cancel) and not pivoted)


class StepWrite(NamedTuple):
    """A step (not a pivot) to journal under its attempt's fence."""

    run_id: str
    token: int
    step_id: str
    result_json: str
    # How long its fn ran, in seconds.
    duration: float | None = None


class StepWritten(NamedTuple):
    """What journalling a step in a batch did."""

    # The value as this statement stored it (JSON), or None: decide it alone with record_step().
    stored: str | None
    # A cancel was requested (and no pivot step was journalled); meaningful when stored.
    cancel_requested: bool


_NOT_STORED = StepWritten(None, False)


def record_steps(writes: list[StepWrite], conn: BaseDatabaseWrapper | None = None) -> list[StepWritten]:
    """Journal steps, one statement for them all (one alone: its own plainer statement); one outcome per write.

    ``conn``: the connection to write on; this thread's durable connection by default.
    """
    if len(writes) == 1:
        [write] = writes
        row = fetch_one(
            RECORD_STEP_ALONE,
            {
                "run_id": write.run_id,
                "token": write.token,
                "step_id": write.step_id,
                "result": write.result_json,
                "duration": write.duration,
            },
            conn,
        )
        return [_NOT_STORED if row is None else StepWritten(row[0], bool(row[1]))]
    with cursor_on(conn) as cur:
        cur.execute(
            RECORD_STEPS,
            {
                "run_ids": [write.run_id for write in writes],
                "tokens": [write.token for write in writes],
                "step_ids": [write.step_id for write in writes],
                "results": [write.result_json for write in writes],
                "durations": [write.duration for write in writes],
            },
        )
        return [StepWritten(stored, bool(cancel)) for stored, cancel in cur.fetchall()]


def lock_held(cur: CursorWrapper, run_id: str, token: int) -> tuple[bool, str | None]:
    """Lock the held run; returns (cancel_requested, tenant_id)."""
    cur.execute(LOCK_HELD, {"run_id": run_id, "token": token})
    row: tuple[bool, str | None] | None = cur.fetchone()
    if row is None:
        raise LeaseLost()
    return row


def insert_step(cur: CursorWrapper, run_id: str, step_id: str, tenant_id: str | None, value: object) -> Any:
    """Journal ``value`` (first committed value wins); returns the stored value."""
    cur.execute(
        INSERT_STEP,
        {
            "run_id": run_id,
            "step_id": step_id,
            "result": json_text(value, what="a journal value"),
            "tenant_id": tenant_id,
        },
    )
    stored = stored_step(cur, run_id, step_id)
    assert stored is not None, "the entry was just inserted, or an earlier one is kept"
    return stored[0]


def held_transaction() -> transaction.Atomic:
    """The transaction a suspension or a spawn locks the held run in (``lock_held``) and journals in."""
    return transaction.atomic(using=connection().alias)
