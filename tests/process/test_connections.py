"""A worker's connections are bounded whatever its concurrency: the engine shares a few, a handler's are its own."""

import pytest
from django.db import connection

from durable_django import api
from durable_django.conf import durable_settings
from tests.helpers import wait_until
from tests.workflows import effects

pytestmark = [pytest.mark.process, pytest.mark.django_db(transaction=True)]

CONCURRENCY = 32

# The connections to this database opened since the test started, other than the test's own: the worker's.
WORKER_CONNECTIONS = """
SELECT application_name LIKE 'durable_worker %%', query LIKE 'LISTEN%%', count(*) FROM pg_stat_activity
WHERE datname = current_database() AND backend_type = 'client backend' AND pid <> ALL(%s)
GROUP BY 1, 2
"""

# The worker's LISTEN sessions: a session an earlier test of this database left listening is not the worker's.
LISTENING = """
SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND query LIKE 'LISTEN%%' AND pid <> ALL(%s)
"""
RUNNING = "SELECT count(*) FROM durable_run WHERE status = 'running' AND attempt_started_at IS NOT NULL"
# Runs that have journalled at least three steps: every slot is busy writing.
WRITING = "SELECT count(*) FROM (SELECT run_id FROM durable_step GROUP BY run_id HAVING count(*) >= 3) s"


def scalar(sql, params=None):
    with connection.cursor() as cur:
        cur.execute(sql, params)
        return cur.fetchone()[0]


def test_a_worker_at_concurrency_32_holds_a_few_engine_connections_and_handlers_keep_their_own(workers):
    """32 handlers journal steps at once, half of them also querying through the ORM in every step.

    Before the engine shared its connections, this worker held 37 (one per slot thread, plus the claim
    loop, heartbeat, LISTEN, reconciler and scheduler). Now the engine holds at most ENGINE_CONNECTIONS
    plus its LISTEN session, and only the slots whose handlers query the ORM hold one of their own.
    """
    orm_runs = CONCURRENCY // 2
    run_ids = [api.enqueue("tests.busy_until_released", {"orm": n < orm_runs}).run_id for n in range(CONCURRENCY)]
    ours = our_connections()
    worker = workers.start("--concurrency", str(CONCURRENCY))
    wait_until(lambda: scalar(RUNNING) == CONCURRENCY, timeout=60, message="every slot to run an attempt")
    wait_until(lambda: scalar(WRITING) == CONCURRENCY, timeout=60, message="every attempt to journal steps")
    wait_until(lambda: scalar(LISTENING, [ours]) == 1, timeout=60, message="the worker's LISTEN session")
    engine_bound = durable_settings.ENGINE_CONNECTIONS + 1  # the pool, and the LISTEN session
    peak_engine = peak_other = 0
    for _ in range(50):  # samples while all 32 attempts journal steps
        with connection.cursor() as cur:
            cur.execute(WORKER_CONNECTIONS, [ours])
            rows = cur.fetchall()
        engine = sum(count for named, _listen, count in rows if named)
        other = sum(count for named, _listen, count in rows if not named)
        assert [named for named, listen, _count in rows if listen] == [True], rows  # one LISTEN, named
        peak_engine, peak_other = max(peak_engine, engine), max(peak_other, other)
        assert engine <= engine_bound, rows
        assert other <= orm_runs, rows  # the ORM handlers' own: none for a handler that makes no query
    effects.touch("release")
    wait_until(
        lambda: all(api.get_run(run_id).status == "succeeded" for run_id in run_ids),
        timeout=120,
        message="every run to succeed once released",
    )
    assert worker.poll() is None
    assert 2 <= peak_engine <= engine_bound and peak_other == orm_runs, (peak_engine, peak_other)
    # An attempt is the worker's request: with CONN_MAX_AGE = 0 (Django's default) a handler's own
    # connection is closed when its attempt ends, while the engine keeps its few.
    wait_until(lambda: counts(ours)[1] == 0, message="the handlers' own connections to close")
    assert 1 <= counts(ours)[0] <= engine_bound


def test_djangos_connection_pool_bounds_the_handlers_own_connections(workers):
    """With OPTIONS["pool"] (max_size 4) 32 handlers that query the ORM in every step share 4 connections:
    each takes one for its attempt and gives it back when the attempt ends."""
    pytest.importorskip("psycopg_pool")
    pool_size = 4
    run_ids = [api.enqueue("tests.busy_until_released", {"orm": True, "steps": 5}).run_id for _ in range(CONCURRENCY)]
    ours = our_connections()
    worker = workers.start("--concurrency", str(CONCURRENCY), DURABLE_TEST_HANDLER_POOL=pool_size)
    peak_other = 0

    def all_succeeded():
        nonlocal peak_other
        engine, other = counts(ours)
        assert engine <= durable_settings.ENGINE_CONNECTIONS + 1 and other <= pool_size, (engine, other)
        peak_other = max(peak_other, other)
        return all(api.get_run(run_id).status == "succeeded" for run_id in run_ids)

    wait_until(all_succeeded, timeout=180, message="every run to succeed")
    assert worker.poll() is None
    assert peak_other >= 1


def our_connections():
    """The backends of this database open now (the test's own): what is opened later is the worker's."""
    with connection.cursor() as cur:
        cur.execute("SELECT array_agg(pid) FROM pg_stat_activity WHERE datname = current_database()")
        return cur.fetchone()[0]


def counts(ours):
    """(the worker's named connections: engine and LISTEN, the others: its handlers' own)."""
    with connection.cursor() as cur:
        cur.execute(WORKER_CONNECTIONS, [ours])
        rows = cur.fetchall()
    return (
        sum(count for named, _listen, count in rows if named),
        sum(count for named, _listen, count in rows if not named),
    )
