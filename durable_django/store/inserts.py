"""Statements that insert runs: one (enqueue, spawn), a batch (enqueue_many, spawn_many) and a debounced one.

An insert is one statement: it skips a run whose idempotency or coalesce key
already names one, and wakes the workers of a due run's queue with a NOTIFY
delivered at the caller's commit. What it returns is only what the database
decided; the rest of the run is what was sent.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from ..states import RunStatus
from ..submission import NO_LIMITS, BatchRequest, RunTemplate, SubmitRequest
from ..tenancy import unscope
from ..types import Run
from .db import (
    RUN_COLUMNS,
    WAKE_CHANNEL,
    cursor,
    fetch_one,
    from_json,
    retry_policy_of,
    row_to_run,
)

# Sent for an inserted (or moved) run that is due now, delivered at the caller's commit: a column of
# the statement's RETURNING for one run, a CTE over the runs ``inserted`` for a batch (once per queue).
_WAKE_IF_DUE = f"CASE WHEN available_at IS NULL OR available_at <= now() THEN pg_notify('{WAKE_CHANNEL}', queue) END"

_WAKE_BATCH_IF_DUE = f"""
    wake AS (
        SELECT pg_notify('{WAKE_CHANNEL}', queue) FROM (
            SELECT DISTINCT queue FROM inserted WHERE available_at IS NULL OR available_at <= now()) q
    )
"""

_INSERTED_COLUMNS = """
    run_id, name, version, status, idempotency_key, coalesce_key, input, tenant_id, retry_policy,
    queue, priority, parent_run_id, available_at, created_at, updated_at, concurrency_key, concurrency_limit,
    concurrency_while_waiting, rate_key, rate_limit, rate_per, debounce_key, debounce_until, deadline,
    trace_context"""

# A run's deadline: the one given (an instant, or seconds from now), and never later than its parent's.
# Without a parent the lookup is skipped outright (IS NOT NULL first): a probe of the primary key with a
# null id cost an enqueue as much server time as the rest of its INSERT (bench_store, on a fresh table).
_DEADLINE = """least(
    CASE WHEN %(deadline_seconds)s::float8 IS NOT NULL THEN now() + make_interval(secs => %(deadline_seconds)s::float8)
         ELSE %(deadline)s::timestamptz END,
    (SELECT parent.deadline FROM durable_run parent
     WHERE %(parent_run_id)s::text IS NOT NULL AND parent.run_id = %(parent_run_id)s::text))"""

_INSERTED_VALUES = f"""
    %(run_id)s, %(name)s, %(version)s, 'pending', %(idempotency_key)s, %(coalesce_key)s,
    %(input)s::jsonb, %(tenant_id)s, %(retry_policy)s::jsonb, %(queue)s, %(priority)s, %(parent_run_id)s,
    CASE WHEN %(delay)s::float8 IS NULL THEN %(available_at)s::timestamptz
         ELSE now() + make_interval(secs => %(delay)s::float8) END,
    clock_timestamp(), clock_timestamp(), %(concurrency_key)s, %(concurrency_limit)s,
    %(concurrency_while_waiting)s, %(rate_key)s, %(rate_limit)s, %(rate_per)s, %(debounce_key)s,
    now() + make_interval(secs => %(debounce_max_wait)s::float8), {_DEADLINE}, %(trace_context)s::jsonb"""

# Insert a run unless its idempotency key or coalesce key already names one; wake workers. One
# statement, no CTE: an enqueue is one round trip and the least work PostgreSQL can do for it. It
# returns only what the database decided; the rest of the run is what was sent (insert_run).
INSERT_RUN = f"""
INSERT INTO durable_run ({_INSERTED_COLUMNS})
VALUES ({_INSERTED_VALUES})
ON CONFLICT DO NOTHING
RETURNING created_at, updated_at, available_at, deadline, {_WAKE_IF_DUE}
"""

# Insert a batch of runs of one function in one statement: the columns that vary come as one jsonb
# array of rows, [run_id, input, idempotency_key, concurrency_key, concurrency_limit,
# concurrency_while_waiting, rate_key, rate_limit, rate_per] (trailing nulls left out), the rest once.
# A key that already names a run skips that row. The batch's runs are created one microsecond apart in
# input order, so they are claimed in it. Workers are woken once per queue, at commit. Returns how many
# rows were inserted, their run ids if the batch is keyed, and the values every run shares.
INSERT_MANY = f"""
WITH batch AS (
    SELECT e.r->>0 AS run_id, e.r->1 AS input, e.r->>2 AS idempotency_key, e.r->>3 AS concurrency_key,
           (e.r->>4)::int AS concurrency_limit, coalesce((e.r->>5)::boolean, false) AS concurrency_while_waiting,
           e.r->>6 AS rate_key, (e.r->>7)::int AS rate_limit, (e.r->>8)::float8 AS rate_per, e.position
    FROM jsonb_array_elements(%(rows)s::jsonb) WITH ORDINALITY AS e(r, position)
), shared AS (
    SELECT CASE WHEN %(delay)s::float8 IS NULL THEN %(available_at)s::timestamptz
                ELSE now() + make_interval(secs => %(delay)s::float8) END AS available_at,
           {_DEADLINE} AS deadline, clock_timestamp() AS created_at
), inserted AS (
    INSERT INTO durable_run ({_INSERTED_COLUMNS})
    SELECT b.run_id, %(name)s, %(version)s, 'pending', b.idempotency_key, NULL, b.input, %(tenant_id)s,
           %(retry_policy)s::jsonb, %(queue)s, %(priority)s, %(parent_run_id)s, shared.available_at,
           shared.created_at + (b.position - 1) * interval '1 microsecond',
           shared.created_at + (b.position - 1) * interval '1 microsecond',
           b.concurrency_key, b.concurrency_limit, b.concurrency_while_waiting, b.rate_key, b.rate_limit, b.rate_per,
           NULL, NULL, shared.deadline, %(trace_context)s::jsonb
    FROM batch b CROSS JOIN shared
    ORDER BY b.position
    ON CONFLICT DO NOTHING
    RETURNING run_id, queue, available_at
),
{_WAKE_BATCH_IF_DUE}
SELECT (SELECT count(*) FROM inserted),
       CASE WHEN %(keyed)s THEN (SELECT array_agg(run_id) FROM inserted) END,
       shared.created_at, shared.available_at, shared.deadline, (SELECT count(*) FROM wake)
FROM shared
"""

# A debounced submit: insert a run, or move the unclaimed pending run of its key: the last input wins,
# its start moves to the delay after this call, but never past the max_wait counted from its first call.
DEBOUNCE = f"""
INSERT INTO durable_run AS r ({_INSERTED_COLUMNS})
VALUES ({_INSERTED_VALUES})
ON CONFLICT (debounce_key) WHERE status = 'pending' AND attempts = 0 DO UPDATE SET
    input = EXCLUDED.input,
    available_at = least(EXCLUDED.available_at, r.debounce_until),
    updated_at = now()
RETURNING {RUN_COLUMNS}, {_WAKE_IF_DUE}
"""


def new_run_id() -> str:
    """A random (version 4) UUID as text, as ``str(uuid.uuid4())`` gives it, for half its cost."""
    [run_id] = new_run_ids(1)
    return run_id


def new_run_ids(count: int) -> list[str]:
    """``count`` random (version 4) UUIDs as text, like new_run_id(), made from one read of the OS's
    randomness: a batch of ten thousand costs a fifth of as many uuid4() calls."""
    raw = os.urandom(16 * count).hex()
    ids = []
    for start in range(0, 32 * count, 32):
        h = raw[start : start + 32]
        # Version 4 in the 13th digit; the variant (10xx) in the top bits of the 17th.
        ids.append(f"{h[:8]}-{h[8:12]}-4{h[13:16]}-{_VARIANT[h[16]]}{h[17:20]}-{h[20:]}")
    return ids


_VARIANT = {digit: "89ab"[int(digit, 16) & 3] for digit in "0123456789abcdef"}


def _template_params(template: RunTemplate) -> dict[str, Any]:
    """What every run of a submit shares, as the insert statements' parameters."""
    options = template.options
    return {
        "name": template.name,
        "version": template.version,
        "tenant_id": options.tenant_id,
        "retry_policy": template.retry_policy,
        "queue": options.queue,
        "priority": options.priority,
        "parent_run_id": template.parent_run_id,
        "delay": options.delay,
        "available_at": options.available_at,
        "deadline": options.deadline,
        "deadline_seconds": options.deadline_seconds,
        "trace_context": template.trace_context,
    }


def run_insert_params(request: SubmitRequest) -> dict[str, Any]:
    """INSERT_RUN's (and DEBOUNCE's) parameters for one run."""
    limits = request.limits
    return {
        **_template_params(request.template),
        "run_id": request.run_id,
        "input": request.input,
        "idempotency_key": request.idempotency_key,
        "coalesce_key": request.coalesce_key,
        "concurrency_key": limits.concurrency_key,
        "concurrency_limit": limits.concurrency_limit,
        "concurrency_while_waiting": limits.while_waiting,
        "rate_key": limits.rate_key,
        "rate_limit": limits.rate_limit,
        "rate_per": limits.rate_per,
        "debounce_key": request.debounce_key,
        "debounce_max_wait": request.debounce_max_wait,
    }


def pending_run(
    template: RunTemplate,
    run_id: str,
    input: Any,
    idempotency_key: str | None,
    coalesce_key: str | None,
    created_at: datetime,
    updated_at: datetime,
    available_at: datetime | None,
    deadline: datetime | None,
) -> Run:
    """A run an insert has just stored, from what was sent and what the database decided."""
    return Run(
        run_id=run_id,
        name=template.name,
        version=template.version,  # type: ignore[arg-type]  # None only for a version no process registers
        status=RunStatus.PENDING,
        input=input,
        output=None,
        error=None,
        attempts=0,
        tenant_id=template.tenant_id,
        idempotency_key=unscope(idempotency_key),
        coalesce_key=unscope(coalesce_key),
        parent_run_id=template.parent_run_id,
        queue=template.options.queue,
        priority=template.options.priority,
        available_at=available_at,
        leased_until=None,
        created_at=created_at,
        updated_at=updated_at,
        cancel_requested_at=None,
        cancel_refused_at=None,
        retry_policy=retry_policy_of(template.retry_policy),
        deadline=deadline,
        trace_context=from_json(template.trace_context),
    )


def insert_run(request: SubmitRequest) -> Run | None:
    """Insert a run; returns the Run as it was stored, or None when a key joined an existing one."""
    row = fetch_one(INSERT_RUN, run_insert_params(request))
    if row is None:
        return None
    created_at, updated_at, available_at, deadline, _woken = row
    return pending_run(
        request.template,
        request.run_id,
        from_json(request.input),
        request.idempotency_key,
        request.coalesce_key,
        created_at,
        updated_at,
        available_at,
        deadline,
    )


def _batch_rows(batch: BatchRequest) -> str:
    """INSERT_MANY's rows as jsonb text: each input is JSON text already, so it is embedded as it is.

    Run ids are made by new_run_ids() (hex digits and dashes), so they need no escaping.
    """
    if not batch.keyed and all(limits is NO_LIMITS for limits in batch.limits):
        # Unlimited runs without keys, the common case: [run_id, input] rows.
        pairs = zip(batch.run_ids, batch.inputs, strict=True)
        return "[" + ",".join(f'["{run_id}",{encoded}]' for run_id, encoded in pairs) + "]"
    dumps = json.dumps
    rows = []
    for run_id, encoded_input, key, limits in zip(
        batch.run_ids, batch.inputs, batch.idempotency_keys, batch.limits, strict=True
    ):
        rest = [
            key,
            limits.concurrency_key,
            limits.concurrency_limit,
            limits.while_waiting,
            limits.rate_key,
            limits.rate_limit,
            limits.rate_per,
        ]
        # Trailing nulls are left out (and the false of concurrency_while_waiting, which SQL reads back as false).
        while rest and (rest[-1] is None or rest[-1] is False):
            rest.pop()
        tail = "".join("," + ("null" if value is None else dumps(value)) for value in rest)
        rows.append(f'["{run_id}",{encoded_input}{tail}]')
    return "[" + ",".join(rows) + "]"


@dataclass(frozen=True, slots=True)
class InsertedBatch:
    """What INSERT_MANY stored: which rows of the batch, and the values they share."""

    batch: BatchRequest
    # The run ids inserted; None when every row was (a batch without keys conflicts with nothing).
    inserted: frozenset[str] | None
    created_at: datetime
    available_at: datetime | None
    deadline: datetime | None

    def __contains__(self, run_id: object) -> bool:
        return self.inserted is None or run_id in self.inserted

    def runs(self) -> list[Run | None]:
        """Each row's run as it was stored (None for a row a key refused), in the batch's order."""
        batch, template = self.batch, self.batch.template
        available_at, deadline, created, tick = self.available_at, self.deadline, self.created_at, _MICROSECOND
        # Every input decoded by one parse (each is JSON text): five times faster than one parse each.
        inputs = json.loads("[" + ",".join(batch.inputs) + "]")
        runs: list[Run | None] = []
        for run_id, input, key in zip(batch.run_ids, inputs, batch.idempotency_keys, strict=True):
            if self.inserted is not None and run_id not in self.inserted:
                runs.append(None)
            else:
                runs.append(pending_run(template, run_id, input, key, None, created, created, available_at, deadline))
            created += tick
        return runs


# The batch's runs are created this far apart, in input order (see INSERT_MANY).
_MICROSECOND = timedelta(microseconds=1)


def insert_many(batch: BatchRequest) -> InsertedBatch:
    """Insert a batch of runs in one statement (see INSERT_MANY).

    Returns:
        Which rows were inserted (a row whose key names a run already is not), and what they share.
    """
    keyed = batch.keyed
    with cursor() as cur:
        cur.execute(INSERT_MANY, {**_template_params(batch.template), "rows": _batch_rows(batch), "keyed": keyed})
        count, inserted_ids, created_at, available_at, deadline, _woken = cur.fetchone()
    assert keyed or count == batch.size, "a batch without keys conflicts with nothing"
    inserted = frozenset(inserted_ids or ()) if keyed else None
    return InsertedBatch(batch, inserted, created_at, available_at, deadline)


def debounce(request: SubmitRequest) -> Run:
    """Insert a debounced run, or move the unclaimed pending run of its key; returns it as this call left it."""
    with cursor() as cur:
        cur.execute(DEBOUNCE, run_insert_params(request))
        row = cur.fetchone()
    assert row is not None  # an upsert always returns its row
    return row_to_run(row)
