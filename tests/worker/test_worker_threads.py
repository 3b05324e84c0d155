"""The worker's threads, run in the test process so a fault lands exactly where it matters."""

import logging
import threading
import time

import psycopg
import pytest
from django.db import connections

from durable_django import api, faults
from durable_django.conf import durable_settings
from durable_django.engine import lifecycle
from durable_django.engine.attempt_state import Outcome
from durable_django.engine.execute import execute
from durable_django.worker.heartbeat import Heartbeat
from durable_django.worker.loop import Worker, WorkerOptions
from durable_django.worker.reconciler import ReconcilerThread
from durable_django.worker.slots import SlotPool
from tests.helpers import subprocess_database_url, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def worker_thread():
    """A worker running in a thread; stopped (and its thread joined) at teardown."""
    worker = Worker(WorkerOptions(concurrency=1, scheduler=False, grace=5))
    errors = []

    def run():
        try:
            worker.run()
        except BaseException as exc:  # the test asserts the loop never dies
            errors.append(exc)
            raise
        finally:
            connections.close_all()

    thread = threading.Thread(target=run, name="worker-under-test")
    thread.start()
    yield thread, errors, worker
    worker.request_stop()
    thread.join(timeout=60)
    assert not thread.is_alive()


def test_a_connection_cut_between_a_claim_and_the_next_due_query_does_not_stop_the_worker(worker_thread):
    thread, errors, worker = worker_thread
    cut = threading.Event()
    ended = []

    def cut_once():
        if not cut.is_set():
            ended.append(cut_the_engines_connections(worker.options.worker_id))
            cut.set()

    with faults.injected("worker.claimed", cut_once):
        wait_until(cut.is_set, message="the claim loop to claim")
        run = api.enqueue("tests.noop", {"after": "the cut"})
        wait_until(lambda: api.get_run(run.run_id).status == "succeeded", message="the run enqueued after the cut")
    assert thread.is_alive() and errors == []
    assert ended[0] >= 1


def cut_the_engines_connections(worker_id):
    """Have the server end the connections the worker's engine shares (the claim loop's among them).

    Returns:
        How many it ended.
    """
    with psycopg.connect(subprocess_database_url(), autocommit=True) as other:
        return other.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE application_name = %s AND query NOT LIKE 'LISTEN%%'",
            [f"durable_worker {worker_id}"],
        ).fetchone()[0]


def cut_this_threads_connection():
    """Have the server end the calling thread's durable connection, as a restart or failover does."""
    with connections[durable_settings.DATABASE].cursor() as cur:
        cur.execute("SELECT pg_backend_pid()")
        [pid] = cur.fetchone()
    with psycopg.connect(subprocess_database_url(), autocommit=True) as other:
        other.execute("SELECT pg_terminate_backend(%s)", [pid])


def test_a_reconciler_pass_on_a_cut_connection_warns_and_is_tried_again_soon(settings, caplog):
    settings.DURABLE = {**settings.DURABLE, "RECONCILE_SECONDS": 600}  # the next regular pass: ten minutes away
    passes = []
    halt = threading.Event()
    thread = ReconcilerThread(halt, passes.append)
    cut = threading.Event()

    def cut_once():
        if not cut.is_set():
            cut.set()
            cut_this_threads_connection()

    with faults.injected("reconciler.pass", cut_once), caplog.at_level(logging.WARNING, "durable_django"):
        thread.start()
        try:
            wait_until(lambda: passes, timeout=60, message="a pass after the cut (within seconds, not ten minutes)")
        finally:
            halt.set()
            thread.join(timeout=30)
    assert cut.is_set() and not thread.is_alive()
    [warning] = [record for record in caplog.records if "reconciler: pass failed" in record.getMessage()]
    assert warning.levelno == logging.WARNING and warning.exc_info is None


def test_a_renewal_the_database_refused_is_tried_again_long_before_the_next_beat(settings):
    """Two PostgreSQL restarts a second apart once failed two regular beats in a row, and the worker gave up
    leases the database had kept (the chaos soak caught it re-running steps). A refused renewal is now tried
    again after a tenth of a second."""
    settings.DURABLE = {**settings.DURABLE, "LEASE_SECONDS": 6}  # a beat every 2 s
    api.enqueue("tests.noop", {})
    [attempt] = lifecycle.claim(
        limit=1,
        start_now=1,
        worker_id="test",
        bounds=lifecycle.claim_bounds(functions=None, queues=None, tenant_id=None),
    )
    pool, halt = SlotPool(1), threading.Event()
    pool.add([attempt])
    renewed = api.get_run(attempt.run.run_id).leased_until
    beats, reachable = [], []
    cut = threading.Event()

    def cut_once():
        if not cut.is_set():
            cut.set()
            cut_this_threads_connection()

    heartbeat = Heartbeat(pool, halt, reachable.append, on_beat=lambda: beats.append(time.monotonic()))
    with faults.injected("heartbeat.renew", cut_once):
        heartbeat.start()
        try:
            wait_until(lambda: len(beats) >= 2, timeout=60, message="a beat after the refused one")
        finally:
            halt.set()
            heartbeat.join(timeout=30)
    assert cut.is_set() and reachable[:2] == [False, True], reachable
    # The regular beat is 2 s away; the retry comes after 0.1 s (the bound leaves ten times that).
    assert beats[1] - beats[0] < 1.0, beats
    assert api.get_run(attempt.run.run_id).leased_until > renewed
    assert not attempt.lost


def test_a_failure_landing_that_waits_out_a_cut_connection_while_the_lease_goes_ends_lost_not_raising():
    """The chaos soak caught a slot thread dying: a handler failed, its failure's landing met a cut connection,
    and while it waited to send it again the heartbeat gave the lease up; the LeaseLost that followed
    escaped ``execute`` (and the slot's guard, which caught ``Exception`` only). It ends the attempt lost."""
    api.enqueue("tests.always_fails", {})
    [attempt] = lifecycle.claim(
        limit=1,
        start_now=1,
        worker_id="test",
        bounds=lifecycle.claim_bounds(functions=None, queues=None, tenant_id=None),
    )
    cut_this_threads_connection()

    class LeaseGoesWhileTheWriteWaits(logging.Handler):
        def emit(self, record):
            if "keeping the write to send again" in record.getMessage():
                attempt.stop(lost=True)  # what the heartbeat does after two thirds of a lease

    handler = LeaseGoesWhileTheWriteWaits()
    logging.getLogger("durable_django").addHandler(handler)
    try:
        assert execute(attempt) == Outcome.LOST
    finally:
        logging.getLogger("durable_django").removeHandler(handler)
    assert attempt.lost
    run = api.get_run(attempt.run.run_id)
    assert (run.status, run.failures) == ("running", 0)  # nothing written: its lease expires, and it is recovered


def test_a_step_write_that_outlasts_its_lease_through_two_cuts_ends_the_attempt_lost_not_failed(settings):
    """The chaos soak caught a run charged a failure for a database outage: a step's journal write met the
    connection a PostgreSQL restart cut and waited to send it again; its worker stalled past a lease (a
    SIGSTOP), and the next try met the connection a second restart had cut. Past a lease the write stopped
    trying, and the disconnect reached the handler as its error: the attempt failed and the failure counted
    against the retry budget. Having stopped trying, the attempt treats its lease as lost, as the heartbeat
    does: it writes nothing, and the run is recovered once the lease expires."""
    settings.DURABLE = {**settings.DURABLE, "LEASE_SECONDS": 1}
    api.enqueue("tests.quick_then_done", {})
    [attempt] = lifecycle.claim(
        limit=1,
        start_now=1,
        worker_id="test",
        bounds=lifecycle.claim_bounds(functions=None, queues=None, tenant_id=None),
    )
    second_cut = threading.Event()

    def cut_when_asked(execute, sql, params, many, context):
        if second_cut.is_set():
            second_cut.clear()
            end_backend(context["connection"].connection.info.backend_pid)
        return execute(sql, params, many, context)

    class StallPastTheLease(logging.Handler):
        def emit(self, record):
            if "keeping the write to send again" in record.getMessage() and not stalled:
                stalled.append(record)
                time.sleep(durable_settings.LEASE_SECONDS)  # the worker stopped, past its lease
                second_cut.set()  # and a second restart cuts the connection its next try sends on

    stalled = []
    handler = StallPastTheLease()
    logging.getLogger("durable_django").addHandler(handler)
    conn = connections[durable_settings.DATABASE]
    try:
        with faults.injected("step.returned", cut_this_threads_connection), conn.execute_wrapper(cut_when_asked):
            outcome = execute(attempt)
    finally:
        logging.getLogger("durable_django").removeHandler(handler)
    assert stalled and not second_cut.is_set()  # both cuts happened
    assert outcome == Outcome.LOST
    run = api.get_run(attempt.run.run_id)
    assert (run.status, run.failures, run.error) == ("running", 0, None)  # its lease expires; it is recovered


def end_backend(pid):
    """Have the server end the session ``pid``, and wait until it is gone."""
    with psycopg.connect(subprocess_database_url(), autocommit=True) as other:
        other.execute("SELECT pg_terminate_backend(%s)", [pid])
        wait_until(
            lambda: other.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", [pid]).fetchone()[0] == 0,
            message=f"session {pid} to end",
        )
