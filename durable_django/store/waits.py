"""Statements by which a held run waits, and what ends a wait: sleeps, signals and children.

A suspension checks what it waits for and registers the wait in one
transaction, under the run's row lock, so no signal or child landing is lost
between the two: ``emit_signal`` and every child's landing take that lock
first. A wait's deadline is journalled once, by the database clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.db.backends.utils import CursorWrapper

from ..exceptions import NotAChild, RunNotFound
from ..journal_ids import WaitingFor
from ..states import TERMINAL_STATUSES, RunStatus
from ..types import ChildResult
from . import cancellation, flow, journal, kin
from .db import WAKE_CHANNEL, cursor, from_json
from .forks import lineage

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

# Lock a direct child for a result wait (a child of a run this one was forked from, for a copied spawn),
# and read its outcome.
LOCK_CHILD = f"""
SELECT status, output::text, error, error_type FROM durable_run
WHERE run_id = %(child_run_id)s AND parent_run_id IN {lineage("%(run_id)s::text")}
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
# toward the wait (store/kin.py WAKE_PARENT). Every landing of a child locks its parent first, so
# under the held run's lock no awaited child finishes between the read and the mark.
MARK_AWAITED = """
UPDATE durable_run SET awaited_token = %(token)s
WHERE run_id = ANY(%(child_run_ids)s::text[]) AND parent_run_id = %(run_id)s
  AND status IN ('pending', 'running', 'waiting')
"""

# What wait_for_all reports for a child still live at its timeout (the child is cancelled).
TIMED_OUT: ChildResult = {"state": "timeout", "result": None, "error": None}

# Orders a finished child with no finish time (landed before finish times were kept) after every other.
_NEVER = datetime.max.replace(tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class WaitOutcome:
    """What a suspension did: ``suspended``, or it resolved at once with ``value``."""

    suspended: bool
    value: Any = None
    cancel_requested: bool = False


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


def sleep(
    run_id: str, token: int, step_id: str, *, seconds: float | None = None, until: datetime | None = None
) -> WaitOutcome:
    """Journal a sleep's deadline and park the run until it, unless it has passed."""
    with journal.held_transaction(), cursor() as cur:
        cancel, tenant_id = journal.lock_held(cur, run_id, token)
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
    with journal.held_transaction(), cursor() as cur:
        cancel, tenant_id = journal.lock_held(cur, run_id, token)
        if cancel:
            return WaitOutcome(suspended=False, cancel_requested=True)
        cur.execute(SELECT_SIGNAL, [run_id, signal, occurrence])
        row = cur.fetchone()
        if row is not None:
            return WaitOutcome(
                suspended=False, value=journal.insert_step(cur, run_id, step_id, tenant_id, from_json(row[0]))
            )
        deadline: datetime | None = None
        passed = False
        if timeout_seconds is not None:
            deadline, passed = _deadline(cur, run_id, deadline_step_id, tenant_id, seconds=timeout_seconds)
        if passed:
            return WaitOutcome(suspended=False, value=journal.insert_step(cur, run_id, step_id, tenant_id, default))
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
    with journal.held_transaction(), cursor() as cur:
        cancel, tenant_id = journal.lock_held(cur, run_id, token)
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
        if status in TERMINAL_STATUSES:
            outcome = _child_result(status, output, error)
            return WaitOutcome(suspended=False, value=journal.insert_step(cur, run_id, step_id, tenant_id, outcome))
        deadline: datetime | None = None
        passed = False
        if timeout_seconds is not None:
            deadline, passed = _deadline(cur, run_id, deadline_step_id, tenant_id, seconds=timeout_seconds)
        if passed:
            cancellation.cancel(child_run_id, None)
            timed_out: ChildResult = {"state": "timeout", "result": None, "error": None}
            return WaitOutcome(suspended=False, value=journal.insert_step(cur, run_id, step_id, tenant_id, timed_out))
        _suspend(cur, run_id, token, WaitingFor.child(child_run_id), deadline)
        return WaitOutcome(suspended=True)


def _child_result(status: str, output: str | None, error: str | None) -> ChildResult:
    """What a parent's wait journals of a finished child.

    A child that succeeded on a retry keeps its last failure for the operator, not for its parent.
    """
    return {"state": status, "result": from_json(output), "error": None if status == RunStatus.SUCCEEDED else error}


def _outcomes(cur: CursorWrapper, run_id: str, child_run_ids: list[str]) -> dict[str, ChildResult]:
    cur.execute(SELECT_OUTCOMES, {"run_id": run_id, "child_run_ids": child_run_ids})
    return {child_id: _child_result(status, output, error) for child_id, status, output, error in cur.fetchall()}


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
    with journal.held_transaction(), cursor() as cur:
        cancel, tenant_id = journal.lock_held(cur, run_id, token)
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
            return WaitOutcome(suspended=False, value=journal.insert_step(cur, run_id, step_id, tenant_id, value))
        if not wait_all and done:
            first = min(done, key=lambda child_id: found[child_id][1] or _NEVER)
            value = [child_run_ids.index(first), _outcomes(cur, run_id, [first])[first]]
            return WaitOutcome(suspended=False, value=journal.insert_step(cur, run_id, step_id, tenant_id, value))
        deadline: datetime | None = None
        passed = False
        if timeout_seconds is not None:
            deadline, passed = _deadline(cur, run_id, deadline_step_id, tenant_id, seconds=timeout_seconds)
        if passed:
            if not wait_all:
                return WaitOutcome(suspended=False, value=journal.insert_step(cur, run_id, step_id, tenant_id, None))
            live = [child_id for child_id in distinct if not found[child_id][0]]
            kin.cancel_children(run_id, live)
            outcomes = _outcomes(cur, run_id, done)
            value = [outcomes.get(child_id, TIMED_OUT) for child_id in child_run_ids]
            return WaitOutcome(suspended=False, value=journal.insert_step(cur, run_id, step_id, tenant_id, value))
        cur.execute(MARK_AWAITED, {"run_id": run_id, "token": token, "child_run_ids": distinct})
        awaiting = cur.rowcount if wait_all else 1
        _suspend(cur, run_id, token, WaitingFor.children(wait_all=wait_all), deadline, awaiting=awaiting)
        return WaitOutcome(suspended=True)


def emit_signal(run_id: str, signal: str, occurrence: int, value_json: str, tenant_id: str | None) -> Any:
    """Store a signal (first value wins) and wake the run if it waits for it; returns the stored value."""
    with journal.held_transaction(), cursor() as cur:
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
