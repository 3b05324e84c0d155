"""Two bulk cancels over overlapping filters and a worker claiming and landing the same runs, at once.

Each bulk operation's batches lock hundreds of rows in one transaction (parents with their children), the
worker's landings lock a parent before its child: from real threads released together, none may wait for
another in a cycle, every run must end cancelled, landed by the worker, or running with its cancel
requested, and no run may be cancelled, landed or counted twice.
"""

import threading
from collections import Counter

import psycopg
import pytest
from django.db import connections

from durable_django import api, durable, signals
from durable_django.api.bulk import start_bulk
from durable_django.engine import bulk_batch
from durable_django.store.sessions import listening
from durable_django.testing import claim, run_until_idle
from durable_django.types import Run
from tests.helpers import other_sessions, sql, subprocess_database_url, wait_until
from tests.store.factories import complete

pytestmark = pytest.mark.django_db(transaction=True)

TREES = 40
CHILDREN = 5
LONE = 600
# A bound for the whole race, ten times what it takes on a loaded two-core machine.
JOIN_SECONDS = 300


def deadlocks(kept: set[int]):
    """Deadlocks PostgreSQL broke in this database, once every session but ``kept`` has ended.

    A session reports its statistics as it exits, before it leaves ``pg_stat_activity``: once the threads'
    sessions are gone from it, what they counted is in ``pg_stat_database``.
    """
    connections.close_all()
    wait_until(lambda: other_sessions() <= kept, message="the closed sessions to exit")
    sql("SELECT pg_stat_clear_snapshot()")
    [(count,)] = sql("SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()")
    return count


def bulk_cancel(filters, results, index, start):
    """What the bulk operation's steps do, batch after batch, from this thread."""
    bulk = start_bulk("cancel", filters)
    start.wait()
    totals: Counter[str] = Counter()
    cursor = None
    try:
        while True:
            done = durable._batch(bulk.run_id, "cancel", filters, cursor)
            totals.update(done["outcomes"])
            cursor = done["next_cursor"]
            if cursor is None:
                break
        results[index] = totals
    finally:
        connections.close_all()


def worker(stop, held, landed, start):
    """Claim the lone runs and the children, land every other one succeeded, hold the rest started."""
    start.wait()
    try:
        while not stop.is_set():
            runs = claim(limit=10, functions=["tests.noop", "tests.child"], worker_id="racer")
            for index, run in enumerate(runs):
                if index % 2 == 0 and complete(run, '"done"') == "succeeded":
                    landed.append(run.run_id)
                else:
                    held.append(run.run_id)
    finally:
        connections.close_all()


def test_two_bulk_cancels_and_a_worker_on_the_same_runs_end_with_each_run_ended_once(monkeypatch):
    monkeypatch.setattr(durable, "BATCH", 50)  # many batches, so the three interleave
    children = [{"value": n, "race": True, "wave": 1} for n in range(CHILDREN)]
    parents = [api.enqueue("tests.fan_out", {"children": children, "race": True, "wave": 1}) for _ in range(TREES)]
    run_until_idle(functions=["tests.fan_out"])  # each waits for its children, still pending
    api.enqueue_many("tests.noop", [{"race": True, "wave": 1} for _ in range(LONE)])
    everything = {run_id for (run_id,) in sql("SELECT run_id FROM durable_run")}
    assert len(everything) == TREES * (1 + CHILDREN) + LONE
    heard: list[str] = []

    def on_finished(sender, run, **kwargs):
        heard.append(run.run_id)

    signals.run_finished.connect(on_finished, sender=Run)
    kept = other_sessions()  # the process's own LISTEN session, say, which outlives the race
    deadlocks_before = deadlocks(kept)
    results: list = [None, None]
    held: list[str] = []
    landed: list[str] = []
    stop = threading.Event()
    start = threading.Barrier(3)
    try:
        with listening(["durable_done"]) as listener:
            threads = [
                threading.Thread(target=bulk_cancel, args=({"input_contains": {"race": True}}, results, 0, start)),
                threading.Thread(target=bulk_cancel, args=({"input_contains": {"wave": 1}}, results, 1, start)),
            ]
            racer = threading.Thread(target=worker, args=(stop, held, landed, start))
            racer.start()
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(JOIN_SECONDS)
            stop.set()
            racer.join(JOIN_SECONDS)
            assert not any(thread.is_alive() for thread in [*threads, racer]), "a deadlock: a thread never ended"
            done_notices = Counter(notice.payload for notice in listener.notifies(timeout=1.0, stop_after=10**6))
    finally:
        signals.run_finished.disconnect(on_finished, sender=Run)
    assert None not in results, "a bulk cancel raised"
    assert deadlocks(kept) == deadlocks_before, "PostgreSQL broke a deadlock (a transaction was run again)"
    assert landed and held, "the worker raced nothing"
    statuses = dict(sql("SELECT run_id, status FROM durable_run WHERE run_id = ANY(%s)", [list(everything)]))
    requested = {
        run_id
        for (run_id,) in sql(
            "SELECT run_id FROM durable_run WHERE status = 'running' AND cancel_requested_at IS NOT NULL"
        )
    }
    # Every run ended: cancelled, landed by the worker, or held by it with its cancel requested.
    for run_id, status in statuses.items():
        assert status == "cancelled" or (status == "succeeded" and run_id in landed) or run_id in requested, (
            run_id,
            status,
        )
    assert all(statuses[parent.run_id] == "cancelled" for parent in parents)
    # Nothing twice: one durable_done per landed run, one run_finished per run a bulk cancelled, and no run
    # counted cancelled by both operations.
    ended = {run_id for run_id, status in statuses.items() if status in ("cancelled", "succeeded")}
    assert set(done_notices) == ended and set(done_notices.values()) == {1}
    assert len(heard) == len(set(heard)) and set(heard) <= {r for r, s in statuses.items() if s == "cancelled"}
    assert results[0]["cancelled"] + results[1]["cancelled"] == len(heard)
    assert sum(results[0].values()) == len(everything) and sum(results[1].values()) == len(everything)


def test_a_batch_waits_for_a_parent_before_it_holds_any_child():
    """A landing locks a parent, then its child: a batch that held the child while it waited for the parent
    would deadlock with it. Holding the parent, another session can still lock the children."""
    parent = api.enqueue("tests.fan_out", {"children": [{"value": n} for n in range(3)]})
    run_until_idle(functions=["tests.fan_out"])
    children = [run_id for (run_id,) in sql("SELECT run_id FROM durable_run WHERE parent_run_id = %s", [parent.run_id])]
    outcome = {}

    def cancel_the_children():
        try:
            runs = [api.get_run(run_id) for run_id in children]
            outcome.update(bulk_batch.act("bulk", "cancel", runs))
        finally:
            connections.close_all()

    with psycopg.connect(subprocess_database_url()) as landing:
        landing.execute("SELECT 1 FROM durable_run WHERE run_id = %s FOR UPDATE", [parent.run_id])
        batch = threading.Thread(target=cancel_the_children)
        batch.start()
        wait_until(
            lambda: sql(
                "SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE %s",
                ["%WITH RECURSIVE up%"],
            ),
            message="the batch waiting for the parent's lock",
        )
        locked = landing.execute(
            "SELECT run_id FROM durable_run WHERE run_id = ANY(%s) FOR UPDATE NOWAIT", [children]
        ).fetchall()
        assert len(locked) == len(children)
        landing.commit()
    batch.join(JOIN_SECONDS)
    assert not batch.is_alive() and outcome == {"cancelled": len(children)}
    assert {api.get_run(run_id).status for run_id in children} == {"cancelled"}
