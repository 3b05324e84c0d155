"""Issues 2 and 17: enqueue, a step, and claim+complete through the store against the same operations as raw SQL.

Enqueue and steps alternate with their raw baselines in chunks of ``CHUNK``, so
that drift in the load of the (shared) machine hits both sides alike. Then each
call's cost is split (``cost_split``): wall time, the client's CPU and its
PostgreSQL backend's, for the raw statement, the store's statement sent by plain
psycopg, and the call through the API, interleaved call by call.
"""

from __future__ import annotations

import os
import time
import uuid

from .common import raw_connect, record, reset_tables

RAW_INSERT = """
INSERT INTO bench_raw_run (run_id, name, version, status, input, retry_policy, queue, priority)
VALUES (%s, 'bench.noop', 1, 'pending', 'null'::jsonb, '{}'::jsonb, 'default', 0)
"""
# The fair baseline of an enqueue: the insert also sends its NOTIFY, delivered at commit.
RAW_INSERT_NOTIFY = """
INSERT INTO bench_raw_run (run_id, name, version, status, input, retry_policy, queue, priority)
VALUES (%s, 'bench.noop', 1, 'pending', 'null'::jsonb, '{}'::jsonb, 'default', 0)
RETURNING pg_notify('durable_wake', queue)
"""
RAW_STEP = "INSERT INTO bench_raw_step (run_id, step_id, result) VALUES (%s, %s, 'null'::jsonb)"
CHUNK = 100
# The claim reads the claim index, as the store's claim does: the index's predicate has ``held_by IS NULL``,
# and a query without it scanned and sorted the table (1.47 ms a claim against 0.16 ms).
RAW_CLAIM = """
UPDATE bench_raw_run SET status = 'running', attempts = attempts + 1, worker_id = %s,
    leased_until = now() + interval '30 seconds', claimed_at = now(), started_at = now(), updated_at = now()
WHERE run_id IN (
    SELECT run_id FROM bench_raw_run
    WHERE status = 'pending' AND held_by IS NULL AND (available_at IS NULL OR available_at <= now())
    ORDER BY priority DESC, created_at LIMIT 10 FOR UPDATE SKIP LOCKED)
RETURNING run_id, attempts
"""
RAW_COMPLETE = """
UPDATE bench_raw_run SET status = 'succeeded', output = 'null'::jsonb, leased_until = NULL,
    finished_at = now(), updated_at = now()
WHERE run_id = %s AND attempts = %s AND status = 'running'
"""
# The batched ceiling: the ten claimed runs completed by one fenced statement (two commits per ten runs).
RAW_COMPLETE_MANY = """
UPDATE bench_raw_run r SET status = 'succeeded', output = 'null'::jsonb, leased_until = NULL,
    finished_at = now(), updated_at = now()
FROM unnest(%s::text[], %s::int[]) AS done(run_id, attempts)
WHERE r.run_id = done.run_id AND r.attempts = done.attempts AND r.status = 'running'
"""


def alternate(n: int, store_op, raw_op) -> tuple[float, float]:
    """Time n calls of each side, alternating in chunks; returns (store ops/s, raw ops/s)."""
    store_seconds = raw_seconds = 0.0
    with raw_connect() as conn:
        for start in range(0, n, CHUNK):
            indexes = range(start, min(start + CHUNK, n))
            began = time.perf_counter()
            for index in indexes:
                store_op(index)
            store_seconds += time.perf_counter() - began
            began = time.perf_counter()
            for index in indexes:
                raw_op(conn, index)
            raw_seconds += time.perf_counter() - began
    return n / store_seconds, n / raw_seconds


def enqueue_vs_raw(n: int) -> tuple[float, float]:
    from durable_django import api

    return alternate(
        n,
        lambda index: api.enqueue("bench.noop"),
        lambda conn, index: conn.execute(RAW_INSERT_NOTIFY, [str(uuid.uuid4())]).fetchone(),
    )


def steps_vs_raw(n: int) -> tuple[float, float]:
    """``ctx.step`` of a claimed attempt (on an engine connection, as in a worker) vs a raw INSERT per step."""
    from durable_django import api
    from durable_django.conf import durable_settings
    from durable_django.engine import lifecycle
    from durable_django.engine.context import Context
    from durable_django.store import pool
    from durable_django.store.db import connection

    api.enqueue("bench.noop")
    bounds = lifecycle.claim_bounds(functions=["bench.noop"], queues=None, tenant_id=None)
    [attempt] = lifecycle.claim(limit=1, start_now=1, worker_id="bench", bounds=bounds)
    ctx = Context(attempt, connection=connection())  # as a worker's slot makes it, on the handler's thread
    raw_run_id = str(uuid.uuid4())
    with pool.installed(durable_settings.DATABASE, 1, "durable_worker bench"):
        return alternate(
            n,
            lambda index: ctx.step("noop", lambda: None, occurrence=index),
            lambda conn, index: conn.execute(RAW_STEP, [raw_run_id, f"v1:noop:{index}"]),
        )


# The input search's index (migration 0015), and a document like an application's input.
INPUT_INDEX = "durable_run_input"
CREATE_INPUT_INDEX = f"CREATE INDEX {INPUT_INDEX} ON durable_run USING gin (input jsonb_path_ops)"


def _order_input(index: int) -> dict:
    return {
        "customer": index,
        "address": {"city": "Berlin", "zip": f"{10000 + index % 900}"},
        "items": [{"sku": f"A{index % 50}", "qty": 1 + index % 3}, {"sku": "B7", "qty": 1}],
        "note": "leave at the door",
    }


def input_index_cost(n: int, rounds: int = 6) -> tuple[float, float]:
    """``api.enqueue`` of a realistic input with the input's GIN index vs without it (as before migration 0015).

    Rounds alternate the sides (the order flipping each round), each from an empty table, so both sides
    meet the same table sizes and the same drift of the machine's load.

    Returns:
        (enqueues/s with the index, enqueues/s without).
    """
    from durable_django import api

    per_round = max(n // rounds, CHUNK)
    seconds = {True: 0.0, False: 0.0}
    with raw_connect() as conn:
        for round_number in range(rounds):
            for indexed in (True, False) if round_number % 2 == 0 else (False, True):
                conn.execute("TRUNCATE durable_run, durable_step, durable_signal")
                conn.execute(f"DROP INDEX IF EXISTS {INPUT_INDEX}")
                if indexed:
                    conn.execute(CREATE_INPUT_INDEX)
                began = time.perf_counter()
                for index in range(per_round):
                    api.enqueue("bench.noop", _order_input(index))
                seconds[indexed] += time.perf_counter() - began
        conn.execute(f"DROP INDEX IF EXISTS {INPUT_INDEX}")
        conn.execute(CREATE_INPUT_INDEX)
    total = per_round * rounds
    return total / seconds[True], total / seconds[False]


def _backend_pid(conn) -> int:
    """The server process of a connection (psycopg's, or Django's)."""
    with conn.cursor() as cur:
        cur.execute("SELECT pg_backend_pid()")
        return cur.fetchone()[0]


def _backend_cpu(pid: int) -> float | None:
    """CPU seconds used so far by the PostgreSQL backend ``pid`` (None unless the server is local)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _split(n: int, sides: dict) -> dict[str, tuple[float, float, float | None]]:
    """Per call of each side ({name: (backend pid, call)}), interleaved: (wall, client CPU, server CPU) in µs."""
    wall = dict.fromkeys(sides, 0.0)
    client = dict.fromkeys(sides, 0.0)
    server = {name: _backend_cpu(pid) for name, (pid, _) in sides.items()}
    for index in range(n):
        for name, (_, call) in sides.items():
            began, cpu = time.perf_counter(), time.thread_time()
            call(index)
            client[name] += time.thread_time() - cpu
            wall[name] += time.perf_counter() - began
    costs = {}
    for name, (pid, _) in sides.items():
        start, end = server[name], _backend_cpu(pid)
        used = None if start is None or end is None else (end - start) / n * 1e6
        costs[name] = (wall[name] / n * 1e6, client[name] / n * 1e6, used)
    return costs


def _record_split(what: str, costs: dict[str, tuple[float, float, float | None]]) -> None:
    names = list(costs)
    walls = " / ".join(f"{costs[name][0]:.0f}" for name in names)
    clients = " / ".join(f"{costs[name][1]:.0f}" for name in names)
    servers = " / ".join("?" if costs[name][2] is None else f"{costs[name][2]:.0f}" for name in names)
    record(
        f"{what} per call: {' / '.join(names)}",
        f"wall {walls} us; client CPU {clients}; server CPU {servers}",
        f"{costs[names[0]][0] / costs[names[-1]][0]:.2f}",
    )


def cost_split(n: int) -> None:
    """Where an enqueue's and a step's time goes, against their raw baselines (see the module's docstring)."""
    from django.db import connection, connections

    from durable_django import api
    from durable_django.conf import durable_settings
    from durable_django.engine import lifecycle, submit
    from durable_django.engine.context import Context
    from durable_django.store import inserts, journal, pool
    from durable_django.submission import RunOptions

    reset_tables()
    params = inserts.run_insert_params(submit.request("bench.noop", None, RunOptions()))
    with raw_connect() as raw, raw_connect() as plain:
        plain.prepare_threshold = 0  # as the store's statements are
        _record_split(
            "enqueue",
            _split(
                n,
                {
                    "raw INSERT + NOTIFY": (
                        _backend_pid(raw),
                        lambda i: raw.execute(RAW_INSERT_NOTIFY, [str(uuid.uuid4())]),
                    ),
                    "its statement by psycopg": (
                        _backend_pid(plain),
                        lambda i: plain.execute(inserts.INSERT_RUN, {**params, "run_id": str(uuid.uuid4())}),
                    ),
                    "api.enqueue": (_backend_pid(connection), lambda i: api.enqueue("bench.noop")),
                },
            ),
        )
        reset_tables()
        api.enqueue("bench.noop")
        bounds = lifecycle.claim_bounds(functions=["bench.noop"], queues=None, tenant_id=None)
        [attempt] = lifecycle.claim(limit=1, start_now=1, worker_id="bench", bounds=bounds)
        ctx = Context(attempt, connection=connections[durable_settings.DATABASE])  # as a worker's slot makes it
        (run_id, token), raw_run = attempt.held, str(uuid.uuid4())
        with pool.installed(durable_settings.DATABASE, 1, "durable_worker bench"):
            with pool.borrowed():
                engine = _backend_pid(connection)  # the pool's one connection, which ctx.step borrows
            step = {"run_id": run_id, "token": token, "result": "null", "duration": 0.0}
            _record_split(
                "step",
                _split(
                    n,
                    {
                        "raw INSERT": (_backend_pid(raw), lambda i: raw.execute(RAW_STEP, [raw_run, f"v1:noop:{i}"])),
                        "its statement by psycopg": (
                            _backend_pid(plain),
                            lambda i: plain.execute(journal.RECORD_STEP_ALONE, {**step, "step_id": f"p:{i}"}),
                        ),
                        "ctx.step": (engine, lambda i: ctx.step("noop", lambda: None, occurrence=i)),
                    },
                ),
            )


def raw_drain_loop(conn, worker_id: str, *, batched: bool = False) -> int:
    """Claim 10 at a time and complete them one by one (or, ``batched``, all ten in one statement) until
    nothing is left; returns how many."""
    done = 0
    while True:
        claimed = conn.execute(RAW_CLAIM, [worker_id]).fetchall()
        if not claimed:
            return done
        if batched:
            conn.execute(RAW_COMPLETE_MANY, [[run_id for run_id, _ in claimed], [token for _, token in claimed]])
        else:
            for run_id, attempts in claimed:
                conn.execute(RAW_COMPLETE, [run_id, attempts])
        done += len(claimed)


def main(n: int) -> None:
    print(f"issues 2 and 17: store vs raw SQL, {n} runs, one connection", flush=True)
    reset_tables()
    store_in, raw_in = enqueue_vs_raw(n)
    reset_tables()
    store_step, raw_step = steps_vs_raw(n)
    reset_tables()
    store_cc, raw_cc = claim_complete_vs_raw(n)
    reset_tables()
    with_index, without_index = input_index_cost(n)
    record(
        "enqueue (api.enqueue vs INSERT + NOTIFY)",
        f"{store_in:.0f} vs {raw_in:.0f} runs/s",
        f"{store_in / raw_in:.2f}",
        ">= 0.90",
    )
    record(
        "step (ctx.step vs INSERT)",
        f"{store_step:.0f} vs {raw_step:.0f} steps/s",
        f"{store_step / raw_step:.2f}",
        ">= 0.80",
    )
    record(
        "claim(10)+complete (store vs raw)",
        f"{store_cc:.0f} vs {raw_cc:.0f} runs/s",
        f"{store_cc / raw_cc:.2f}",
        ">= 0.70",
    )
    record(
        "enqueue with the input search index vs without",
        f"{with_index:.0f} vs {without_index:.0f} runs/s",
        f"{with_index / without_index:.2f}",
        ">= 0.90",
    )
    cost_split(n)


def claim_complete_vs_raw(n: int) -> tuple[float, float]:
    """Claim(10)+complete of ``n`` runs through the store vs raw SQL, the two alternating in chunks of ``CHUNK``
    runs, so that drift in the load of the (shared) machine hits both sides alike; (store runs/s, raw runs/s)."""
    from durable_django import api
    from durable_django.store import claims, landing
    from durable_django.worker.loop import WorkerOptions

    for _ in range(n):
        api.enqueue("bench.noop")
    with raw_connect() as conn:
        for _ in range(n):
            conn.execute(RAW_INSERT, [str(uuid.uuid4())])
    bounds = WorkerOptions(functions=["bench.noop"]).claim_bounds()

    def store_claims(count: int) -> int:
        done = 0
        while done < count:
            claimed = claims.claim(limit=10, start_now=10, lease_seconds=30, worker_id="bench", bounds=bounds)
            for item in claimed:
                landing.complete_many([landing.Finished(item.run.run_id, item.run.attempts, "null", None)])
            done += len(claimed)
            if not claimed:
                break
        return done

    def raw_claims(conn, count: int) -> int:
        done = 0
        while done < count:
            claimed = conn.execute(RAW_CLAIM, ["bench"]).fetchall()
            for run_id, attempts in claimed:
                conn.execute(RAW_COMPLETE, [run_id, attempts])
            done += len(claimed)
            if not claimed:
                break
        return done

    store_done = raw_done = 0
    store_seconds = raw_seconds = 0.0
    with raw_connect() as conn:
        while store_done < n or raw_done < n:
            began = time.perf_counter()
            store_done += store_claims(min(CHUNK, n - store_done))
            store_seconds += time.perf_counter() - began
            began = time.perf_counter()
            raw_done += raw_claims(conn, min(CHUNK, n - raw_done))
            raw_seconds += time.perf_counter() - began
    assert (store_done, raw_done) == (n, n), f"completed {store_done} and {raw_done} of {n}"
    return n / store_seconds, n / raw_seconds
