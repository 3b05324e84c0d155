"""Statements on durable_step and durable_signal: the journal, suspensions, spawns and signals.

Each worker write here is fenced on the claim token; a journal write is
first-committed-wins (``ON CONFLICT DO NOTHING``) and the loser reads the winner.
A suspension checks what it waits for and registers the wait in one
transaction, under the run's row lock, so no signal or child landing is lost
between the two.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.db import transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorWrapper

from .. import faults
from ..exceptions import LeaseLost, NotAChild, RunNotFound
from ..journal_ids import WaitingFor
from ..types import ChildResult
from ..values import json_text
from . import cancellation, flow, landing, runs
from .db import WAKE_CHANNEL, connection, cursor, cursor_on, fetch_one, from_json

# Every journal entry of some runs.
SELECT_JOURNAL = "SELECT run_id, step_id, result::text FROM durable_step WHERE run_id = ANY(%s)"

# One journal entry.
SELECT_STEP = "SELECT result::text FROM durable_step WHERE run_id = %s AND step_id = %s"

# Journal a step under the fence (first committed value wins); a pivot step also marks the run.
RECORD_STEP = """
WITH fence AS (
    SELECT run_id, tenant_id, cancel_requested_at IS NOT NULL AND pivoted_at IS NULL AS cancel
    FROM durable_run
    WHERE run_id = %(run_id)s AND attempts = %(token)s AND status = 'running'
    FOR SHARE
), inserted AS (
    INSERT INTO durable_step (run_id, step_id, result, tenant_id, created_at)
    SELECT run_id, %(step_id)s, %(result)s::jsonb, tenant_id, now() FROM fence
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
RECORD_STEP_ALONE = """
INSERT INTO durable_step (run_id, step_id, result, tenant_id, created_at)
SELECT run_id, %(step_id)s, %(result)s::jsonb, tenant_id, now() FROM durable_run
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
    SELECT * FROM unnest(%(run_ids)s::text[], %(tokens)s::int[], %(step_ids)s::text[], %(results)s::text[])
        WITH ORDINALITY AS g(run_id, token, step_id, result, n)
), fence AS (
    SELECT r.run_id, r.attempts, r.tenant_id, r.cancel_requested_at IS NOT NULL AND r.pivoted_at IS NULL AS cancel
    FROM durable_run r
    WHERE (r.run_id, r.attempts) IN (SELECT run_id, token FROM given) AND r.status = 'running'
    FOR SHARE OF r SKIP LOCKED
), inserted AS (
    INSERT INTO durable_step (run_id, step_id, result, tenant_id, created_at)
    SELECT given.run_id, given.step_id, given.result::jsonb, fence.tenant_id, now()
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

# Journal an entry whose value PostgreSQL computes (deadlines), keeping the first one.
RECORD_DEADLINE = """
INSERT INTO durable_step (run_id, step_id, result, tenant_id, created_at)
SELECT %(run_id)s, %(step_id)s,
       jsonb_build_object('at', CASE
           WHEN %(until)s::timestamptz IS NOT NULL THEN to_jsonb(%(until)s::timestamptz)
           WHEN %(seconds)s::float8 IS NOT NULL THEN to_jsonb(now() + make_interval(secs => %(seconds)s::float8))
           END),
       %(tenant_id)s, now()
ON CONFLICT (run_id, step_id) DO NOTHING
"""

# A journalled deadline and whether it has passed, by the database clock.
SELECT_DEADLINE = """
SELECT (result->>'at')::timestamptz, (result->>'at')::timestamptz <= now()
FROM durable_step WHERE run_id = %s AND step_id = %s
"""

# Journal an entry (first committed value wins) inside a held transaction.
INSERT_STEP = """
INSERT INTO durable_step (run_id, step_id, result, tenant_id, created_at)
VALUES (%(run_id)s, %(step_id)s, %(result)s::jsonb, %(tenant_id)s, now())
ON CONFLICT (run_id, step_id) DO NOTHING
"""

# Park the held run: no lease, status waiting, woken by its deadline, a signal, a child or its children
# (for these, how many landings it waits for).
SUSPEND = """
UPDATE durable_run SET status = 'waiting', waiting_for = %(waiting_for)s, available_at = %(until)s,
    awaiting_children = %(awaiting)s, leased_until = NULL, updated_at = now()
WHERE run_id = %(run_id)s AND attempts = %(token)s AND status = 'running'
RETURNING concurrency_key, concurrency_while_waiting, started_at IS NOT NULL, queue
"""

# A stored signal's value.
SELECT_SIGNAL = """
SELECT value::text FROM durable_signal WHERE run_id = %s AND signal = %s AND occurrence = %s
"""

# Store a signal (first committed value wins).
INSERT_SIGNAL = """
INSERT INTO durable_signal (run_id, signal, occurrence, value, tenant_id, created_at)
VALUES (%(run_id)s, %(signal)s, %(occurrence)s, %(value)s::jsonb, %(tenant_id)s, now())
ON CONFLICT (run_id, signal, occurrence) DO NOTHING
"""

# Lock a run for emit_signal() (tenant-bound).
LOCK_FOR_SIGNAL = """
SELECT status, waiting_for, tenant_id::text FROM durable_run
WHERE run_id = %(run_id)s AND (%(tenant_id)s::uuid IS NULL OR tenant_id = %(tenant_id)s::uuid)
FOR UPDATE
"""

# Wake a run waiting on exactly this signal.
WAKE_FOR_SIGNAL = f"""
WITH woken AS (
    UPDATE durable_run SET status = 'pending', waiting_for = NULL, available_at = NULL, updated_at = now()
    WHERE run_id = %(run_id)s AND status = 'waiting' AND waiting_for = %(waiting_for)s
    RETURNING queue
)
SELECT count(*), (SELECT count(*) FROM (SELECT pg_notify('{WAKE_CHANNEL}', queue) FROM woken) n) FROM woken
"""

# A run that spawned a child lands through the full landing statement from then on.
MARK_PARENT = "UPDATE durable_run SET has_children = true WHERE run_id = %s AND NOT has_children"

# Lock a direct child for a result wait, and read its outcome.
LOCK_CHILD = """
SELECT status, output::text, error, error_type FROM durable_run
WHERE run_id = %(child_run_id)s AND parent_run_id = %(run_id)s
FOR UPDATE
"""


# The awaited runs that are direct children of the held run: each one's status and when it finished.
SELECT_AWAITED = """
SELECT run_id, status IN ('succeeded', 'failed', 'cancelled'), finished_at FROM durable_run
WHERE run_id = ANY(%(child_run_ids)s::text[]) AND parent_run_id = %(run_id)s
"""

# How some finished children of the held run landed.
SELECT_OUTCOMES = """
SELECT run_id, status, output::text, error FROM durable_run
WHERE run_id = ANY(%(child_run_ids)s::text[]) AND parent_run_id = %(run_id)s
"""

# Mark the awaited children still live with the held run's fence token: each one's landing then counts
# toward the wait (store/landing.py WAKE_PARENT). Every landing of a child locks its parent first, so
# under the held run's lock no awaited child finishes between the read and the mark.
MARK_AWAITED = """
UPDATE durable_run SET awaited_token = %(token)s
WHERE run_id = ANY(%(child_run_ids)s::text[]) AND parent_run_id = %(run_id)s
  AND status IN ('pending', 'running', 'waiting')
"""

TIMED_OUT: ChildResult = {"state": "timeout", "result": None, "error": None}

# Orders a finished child with no finish time (landed before finish times were kept) after every other.
_NEVER = datetime.max.replace(tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class Recorded:
    value: Any
    cancel_requested: bool


@dataclass(frozen=True, slots=True)
class WaitOutcome:
    """What a suspension did: ``suspended``, or it resolved at once with ``value``."""

    suspended: bool
    value: Any = None
    cancel_requested: bool = False


def load_journal(run_ids: list[str]) -> dict[str, dict[str, Any]]:
    journals: dict[str, dict[str, Any]] = {run_id: {} for run_id in run_ids}
    if not run_ids:
        return journals
    with cursor() as cur:
        cur.execute(SELECT_JOURNAL, [list(run_ids)])
        for run_id, step_id, result in cur.fetchall():
            journals[run_id][step_id] = from_json(result)
    return journals


def _stored_step(cur: CursorWrapper, run_id: str, step_id: str) -> tuple[Any] | None:
    """The journalled value of a step, as a 1-tuple (a stored JSON null is ``(None,)``), or None."""
    cur.execute(SELECT_STEP, [run_id, step_id])
    row = cur.fetchone()
    return None if row is None else (from_json(row[0]),)


def record_step(run_id: str, token: int, step_id: str, result_json: str, *, pivot: bool) -> Recorded:
    """Journal a step; returns the stored value (ours, or an earlier writer's)."""
    with cursor() as cur:
        cur.execute(
            RECORD_STEP,
            {
                "run_id": run_id,
                "token": token,
                "step_id": step_id,
                "result": result_json,
                "pivot": pivot,
            },
        )
        cancel, inserted, pivoted = cur.fetchone()
        if cancel is None:
            raise LeaseLost()
        if inserted is not None:
            return Recorded(from_json(inserted), bool(cancel) and not pivoted)
        stored = _stored_step(cur, run_id, step_id)
    assert stored is not None, "the insert conflicted with this very entry, so it is stored"
    return Recorded(stored[0], bool(cancel) and not pivoted)


@dataclass(frozen=True, slots=True)
class StepWrite:
    """A step (not a pivot) to journal under its attempt's fence."""

    run_id: str
    token: int
    step_id: str
    result_json: str


@dataclass(frozen=True, slots=True)
class StepWritten:
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
            {"run_id": write.run_id, "token": write.token, "step_id": write.step_id, "result": write.result_json},
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
            },
        )
        return [StepWritten(stored, bool(cancel)) for stored, cancel in cur.fetchall()]


def _lock_held(cur: CursorWrapper, run_id: str, token: int) -> tuple[bool, str | None]:
    """Lock the held run; returns (cancel_requested, tenant_id)."""
    cur.execute(LOCK_HELD, {"run_id": run_id, "token": token})
    row: tuple[bool, str | None] | None = cur.fetchone()
    if row is None:
        raise LeaseLost()
    return row


def _deadline(
    cur: CursorWrapper,
    run_id: str,
    step_id: str,
    tenant_id: str | None,
    *,
    seconds: float | None = None,
    until: datetime | None = None,
) -> tuple[datetime, bool]:
    """Journal the deadline once (first call wins); returns (deadline, passed)."""
    cur.execute(
        RECORD_DEADLINE,
        {
            "run_id": run_id,
            "step_id": step_id,
            "tenant_id": tenant_id,
            "seconds": seconds,
            "until": until,
        },
    )
    cur.execute(SELECT_DEADLINE, [run_id, step_id])
    deadline: tuple[datetime, bool] = cur.fetchone()
    return deadline


def _insert_step(cur: CursorWrapper, run_id: str, step_id: str, tenant_id: str | None, value: object) -> Any:
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
    stored = _stored_step(cur, run_id, step_id)
    assert stored is not None, "the entry was just inserted, or an earlier one is kept"
    return stored[0]


def _suspend(
    cur: CursorWrapper,
    run_id: str,
    token: int,
    waiting_for: WaitingFor,
    until: datetime | None,
    *,
    awaiting: int | None = None,
) -> None:
    cur.execute(
        SUSPEND,
        {"run_id": run_id, "token": token, "waiting_for": str(waiting_for), "until": until, "awaiting": awaiting},
    )
    # A run that waits holds no limit slot (unless its concurrency counts while it waits): release one.
    flow.release_slots(
        cur,
        [
            flow.SlotChange(key, while_waiting, started, queue, "running", "waiting")
            for key, while_waiting, started, queue in cur.fetchall()
        ],
    )


def _atomic() -> transaction.Atomic:
    return transaction.atomic(using=connection().alias)


def sleep(
    run_id: str, token: int, step_id: str, *, seconds: float | None = None, until: datetime | None = None
) -> WaitOutcome:
    """Journal a sleep's deadline and park the run until it, unless it has passed."""
    with _atomic(), cursor() as cur:
        cancel, tenant_id = _lock_held(cur, run_id, token)
        if cancel:
            return WaitOutcome(suspended=False, cancel_requested=True)
        deadline, passed = _deadline(cur, run_id, step_id, tenant_id, seconds=seconds, until=until)
        if passed:
            return WaitOutcome(suspended=False, value=deadline)
        _suspend(cur, run_id, token, WaitingFor.sleep(), deadline)
        return WaitOutcome(suspended=True, value=deadline)


def wait_for_signal(
    run_id: str,
    token: int,
    step_id: str,
    deadline_step_id: str,
    *,
    signal: str,
    occurrence: int,
    timeout_seconds: float | None,
    default: object,
) -> WaitOutcome:
    """Return the signal if it is stored, the default if the wait timed out, or park the run."""
    with _atomic(), cursor() as cur:
        cancel, tenant_id = _lock_held(cur, run_id, token)
        if cancel:
            return WaitOutcome(suspended=False, cancel_requested=True)
        cur.execute(SELECT_SIGNAL, [run_id, signal, occurrence])
        row = cur.fetchone()
        if row is not None:
            return WaitOutcome(suspended=False, value=_insert_step(cur, run_id, step_id, tenant_id, from_json(row[0])))
        deadline: datetime | None = None
        passed = False
        if timeout_seconds is not None:
            deadline, passed = _deadline(cur, run_id, deadline_step_id, tenant_id, seconds=timeout_seconds)
        if passed:
            return WaitOutcome(suspended=False, value=_insert_step(cur, run_id, step_id, tenant_id, default))
        _suspend(cur, run_id, token, WaitingFor.signal(signal, occurrence), deadline)
        return WaitOutcome(suspended=True)


def wait_for_child(
    run_id: str,
    token: int,
    step_id: str,
    deadline_step_id: str,
    *,
    child_run_id: str,
    timeout_seconds: float | None,
) -> WaitOutcome:
    """Return a direct child's outcome if it landed, time it out, or park the parent until it lands."""
    with _atomic(), cursor() as cur:
        cancel, tenant_id = _lock_held(cur, run_id, token)
        if cancel:
            return WaitOutcome(suspended=False, cancel_requested=True)
        cur.execute(LOCK_CHILD, {"run_id": run_id, "child_run_id": child_run_id})
        row = cur.fetchone()
        if row is None:
            raise NotAChild(
                f"run {child_run_id} is not a direct child of run {run_id}",
                run_id=run_id,
                child_run_id=child_run_id,
            )
        status, output, error, _error_type = row
        if status in ("succeeded", "failed", "cancelled"):
            # A child that succeeded on a retry keeps its last failure for the operator, not for its parent.
            outcome: ChildResult = {
                "state": status,
                "result": from_json(output),
                "error": None if status == "succeeded" else error,
            }
            return WaitOutcome(suspended=False, value=_insert_step(cur, run_id, step_id, tenant_id, outcome))
        deadline: datetime | None = None
        passed = False
        if timeout_seconds is not None:
            deadline, passed = _deadline(cur, run_id, deadline_step_id, tenant_id, seconds=timeout_seconds)
        if passed:
            cancellation.cancel(child_run_id, None)
            timed_out: ChildResult = {"state": "timeout", "result": None, "error": None}
            return WaitOutcome(suspended=False, value=_insert_step(cur, run_id, step_id, tenant_id, timed_out))
        _suspend(cur, run_id, token, WaitingFor.child(child_run_id), deadline)
        return WaitOutcome(suspended=True)


def _outcomes(cur: CursorWrapper, run_id: str, child_run_ids: list[str]) -> dict[str, ChildResult]:
    cur.execute(SELECT_OUTCOMES, {"run_id": run_id, "child_run_ids": child_run_ids})
    return {
        child_id: {"state": status, "result": from_json(output), "error": error}
        for child_id, status, output, error in cur.fetchall()
    }


def wait_for_children(
    run_id: str,
    token: int,
    step_id: str,
    deadline_step_id: str,
    *,
    child_run_ids: list[str],
    wait_all: bool,
    timeout_seconds: float | None,
) -> WaitOutcome:
    """Wait for direct children: all of them (wait_for_all) or the first to finish (wait_for_any).

    Resolves at once when the wait is over (all finished; one finished) or its
    timeout has passed; otherwise marks the live awaited children and parks the
    run until the last (all) or first (any) of them lands, or the timeout.

    Values journalled: for all, one result per id given, in order (a child still
    live at the timeout is cancelled, with its descendants, and reported as
    ``"timeout"``); for any, ``[index, result]`` of the first to finish (the
    earliest finished, then the first given), or None at the timeout.
    """
    with _atomic(), cursor() as cur:
        cancel, tenant_id = _lock_held(cur, run_id, token)
        if cancel:
            return WaitOutcome(suspended=False, cancel_requested=True)
        distinct = list(dict.fromkeys(child_run_ids))
        cur.execute(SELECT_AWAITED, {"run_id": run_id, "child_run_ids": distinct})
        found = {child_id: (finished, finished_at) for child_id, finished, finished_at in cur.fetchall()}
        strangers = [child_id for child_id in distinct if child_id not in found]
        if strangers:
            raise NotAChild(
                f"run {strangers[0]} is not a direct child of run {run_id}", run_id=run_id, child_run_id=strangers[0]
            )
        done = [child_id for child_id in distinct if found[child_id][0]]
        value: object
        if wait_all and len(done) == len(distinct):
            outcomes = _outcomes(cur, run_id, distinct)
            value = [outcomes[child_id] for child_id in child_run_ids]
            return WaitOutcome(suspended=False, value=_insert_step(cur, run_id, step_id, tenant_id, value))
        if not wait_all and done:
            first = min(done, key=lambda child_id: found[child_id][1] or _NEVER)
            value = [child_run_ids.index(first), _outcomes(cur, run_id, [first])[first]]
            return WaitOutcome(suspended=False, value=_insert_step(cur, run_id, step_id, tenant_id, value))
        deadline: datetime | None = None
        passed = False
        if timeout_seconds is not None:
            deadline, passed = _deadline(cur, run_id, deadline_step_id, tenant_id, seconds=timeout_seconds)
        if passed:
            if not wait_all:
                return WaitOutcome(suspended=False, value=_insert_step(cur, run_id, step_id, tenant_id, None))
            live = [child_id for child_id in distinct if not found[child_id][0]]
            landing.cancel_children(run_id, live)
            outcomes = _outcomes(cur, run_id, done)
            value = [outcomes.get(child_id, TIMED_OUT) for child_id in child_run_ids]
            return WaitOutcome(suspended=False, value=_insert_step(cur, run_id, step_id, tenant_id, value))
        cur.execute(MARK_AWAITED, {"run_id": run_id, "token": token, "child_run_ids": distinct})
        awaiting = cur.rowcount if wait_all else 1
        _suspend(cur, run_id, token, WaitingFor.children(wait_all=wait_all), deadline, awaiting=awaiting)
        return WaitOutcome(suspended=True)


def spawn(run_id: str, token: int, step_id: str, child_params: dict[str, Any]) -> str:
    """Insert a child and journal its id in one transaction; replay adopts the same child."""
    with _atomic(), cursor() as cur:
        _lock_held(cur, run_id, token)
        stored = _stored_step(cur, run_id, step_id)
        if stored is not None:
            journalled_id: str = stored[0]
            return journalled_id
        child = runs.insert_run(child_params) or runs.find_by_idempotency_key(child_params["idempotency_key"])
        # The insert conflicts only on the child's engine-made idempotency key (spawn() refuses a coalesce
        # key), and that child, made under this held run's lock, is committed and cannot be purged while
        # its parent is live: the lookup finds it.
        assert child is not None, "the key that refused the insert names a stored child"
        cur.execute(MARK_PARENT, [run_id])
        child_id: str = _insert_step(cur, run_id, step_id, child_params["tenant_id"], child.run_id)
        return child_id


def spawn_many(run_id: str, token: int, step_id: str, params: dict[str, Any], positions: list[int]) -> list[str]:
    """Insert a batch of children in one statement and journal their ids in one transaction; replay adopts them.

    Args:
        params: the batch's insert parameters (store.runs.INSERT_MANY), every child keyed by the engine.
        positions: for each input, the index of its child in the batch.

    Returns:
        The children's run ids, one per input, in input order.
    """
    with _atomic(), cursor() as cur:
        _cancel, tenant_id = _lock_held(cur, run_id, token)
        stored = _stored_step(cur, run_id, step_id)
        if stored is not None:
            journalled: list[str] = stored[0]
            return journalled
        inserted = runs.insert_many(params)
        faults.reach("spawn_many.inserted")
        made, keys = params["run_ids"], params["idempotency_keys"]
        # As for spawn(): a key that refused its row names a child made under this held run's lock.
        refused = [key for child_id, key in zip(made, keys, strict=True) if child_id not in inserted]
        found = runs.find_by_idempotency_keys(refused) if refused else {}
        children = [
            child_id if child_id in inserted else found[key].run_id for child_id, key in zip(made, keys, strict=True)
        ]
        cur.execute(MARK_PARENT, [run_id])
        child_ids: list[str] = _insert_step(cur, run_id, step_id, tenant_id, [children[index] for index in positions])
        return child_ids


def emit_signal(run_id: str, signal: str, occurrence: int, value_json: str, tenant_id: str | None) -> Any:
    """Store a signal (first value wins) and wake the run if it waits for it; returns the stored value."""
    with _atomic(), cursor() as cur:
        cur.execute(LOCK_FOR_SIGNAL, {"run_id": run_id, "tenant_id": tenant_id})
        row = cur.fetchone()
        if row is None:
            raise RunNotFound(f"no run {run_id}", run_id=run_id)
        _status, _waiting_for, run_tenant = row
        cur.execute(
            INSERT_SIGNAL,
            {
                "run_id": run_id,
                "signal": signal,
                "occurrence": occurrence,
                "value": value_json,
                "tenant_id": run_tenant,
            },
        )
        cur.execute(SELECT_SIGNAL, [run_id, signal, occurrence])
        stored = from_json(cur.fetchone()[0])
        cur.execute(WAKE_FOR_SIGNAL, {"run_id": run_id, "waiting_for": str(WaitingFor.signal(signal, occurrence))})
        return stored
