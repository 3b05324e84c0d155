"""Attempt timeouts and run deadlines with real worker processes."""

import os
import signal
from datetime import timedelta

import pytest
from django.utils import timezone

from durable_django import api
from tests.helpers import sql, wait_until
from tests.workflows import effects

pytestmark = [pytest.mark.process, pytest.mark.django_db(transaction=True)]

TIMED_OUT = "durable_django.exceptions.AttemptTimedOut"
DEADLINE_EXCEEDED = "durable_django.exceptions.DeadlineExceeded"


def status(run_id):
    return api.get_run(run_id).status


def holding_a_lease():
    return sql("SELECT run_id, status FROM durable_run WHERE status = 'running' OR leased_until IS NOT NULL")


def test_a_stuck_sync_handler_is_retried_then_failed_and_past_max_abandoned_the_worker_exits_3(workers):
    stuck = api.enqueue("tests.stuck", {})  # time.sleep(3600) under a 1 s timeout, two attempts
    worker = workers.start("--concurrency", "2", "--max-abandoned", "2", "--grace", "1")
    wait_until(lambda: status(stuck.run_id) == "failed", timeout=60, message="the stuck run to fail")
    failed = api.get_run(stuck.run_id)
    assert (failed.error_type, failed.failures, failed.attempts) == (TIMED_OUT, 2, 2)
    assert "ran longer than its timeout of 1s" in failed.error and "time.sleep" in failed.error
    assert effects.count("stuck-attempt") == 2 and effects.count("stuck-returned") == 0
    # Two threads are stuck, no more than --max-abandoned: their slots went to new threads, which serve.
    others = [api.enqueue("tests.noop", {"n": n}) for n in range(10)]
    wait_until(lambda: all(status(run.run_id) == "succeeded" for run in others), timeout=60, message="other runs")
    assert worker.poll() is None
    # A third stuck thread is one too many: the worker stops claiming, gives the attempt it still runs the
    # grace period, releases it and exits with status 3.
    inflight = api.enqueue("tests.slow", {"seconds": 60, "tag": "inflight"})
    wait_until(lambda: effects.exists("slow-started-inflight"), message="the in-flight attempt")
    third = api.enqueue("tests.stuck_once", {})
    assert worker.wait(timeout=60) == 3
    assert (status(third.run_id), api.get_run(third.run_id).error_type) == ("failed", TIMED_OUT)
    released = api.get_run(inflight.run_id)
    assert (released.status, released.leased_until, released.recoveries) == ("pending", None, 0)
    assert holding_a_lease() == []
    log = workers.output(worker)
    assert "3 threads are stuck in handlers past their time limit (--max-abandoned 2)" in log, log
    assert "released 1 run still running after the grace period" in log, log


def test_an_async_handler_past_its_timeout_is_cancelled_and_its_thread_comes_back(workers):
    run = api.enqueue("tests.async_stuck", {})
    worker = workers.start("--concurrency", "1", "--max-abandoned", "0")
    wait_until(lambda: status(run.run_id) == "failed", timeout=60, message="the async run to time out")
    assert api.get_run(run.run_id).error_type == TIMED_OUT
    wait_until(lambda: effects.exists("async-cancelled"), message="the handler to see its cancellation")
    # Cancelled, its thread came back: nothing is stuck, so even --max-abandoned 0 keeps the worker serving.
    after = api.enqueue("tests.noop", {})
    wait_until(lambda: status(after.run_id) == "succeeded", timeout=60, message="the next run")
    assert worker.poll() is None
    wait_until(lambda: "came back and exits" in workers.output(worker), message="the thread to return")


def test_a_timed_out_attempt_stops_counting_against_concurrency_at_its_timeout(workers):
    stuck = api.enqueue("tests.limited_stuck", {"seconds": 3600, "key": "stuck"})
    workers.start("--concurrency", "2")
    wait_until(lambda: effects.count("limited-stuck-events") == 1, message="the stuck run to start")
    behind = api.enqueue("tests.limited_stuck", {"seconds": 0, "key": "behind"})  # Concurrency(1): held
    wait_until(lambda: status(behind.run_id) == "succeeded", timeout=60, message="the run held behind it")
    assert (status(stuck.run_id), api.get_run(stuck.run_id).error_type) == ("failed", TIMED_OUT)
    with open(effects._path("limited-stuck-events")) as handle:
        events = [line.split() for line in handle.read().splitlines()]
    [stuck_start] = [float(at) for at, what, run_id, *_ in events if run_id == stuck.run_id and what == "start"]
    [behind_start] = [float(at) for at, what, run_id, *_ in events if run_id == behind.run_id and what == "start"]
    # It started only once the stuck attempt's timeout had passed, while that thread still slept.
    assert behind_start - stuck_start >= 1.0
    assert not [what for _, what, run_id, *_ in events if run_id == stuck.run_id and what == "end"]


def test_what_an_abandoned_thread_does_after_its_timeout_is_never_journalled(workers):
    run = api.enqueue("tests.late_step", {"seconds": 4})
    worker = workers.start("--concurrency", "1")
    wait_until(lambda: status(run.run_id) == "succeeded", timeout=60, message="the retry to succeed")
    # The first attempt's step returns three seconds after its timeout; by then the retry has journalled its own.
    wait_until(lambda: "came back and exits" in workers.output(worker), timeout=60, message="the late thread")
    done = api.get_run(run.run_id)
    assert (done.output, done.attempts, done.failures) == ("attempt 2", 2, 1)
    assert [row[0] for row in sql("SELECT result::text FROM durable_step WHERE run_id = %s", [run.run_id])] == [
        '"attempt 2"'
    ]
    assert effects.count("late-step-returned") == 1  # the late step's return was cut short by its stop


def test_deadlines_end_pending_sleeping_waiting_and_running_runs_within_a_poll_interval(workers):
    poll = 2.0
    # This worker serves the queue "work" only: the pending run, in "default", is nobody's to run, yet any
    # worker fails it at its deadline.
    worker = workers.start("--concurrency", "4", "--queues", "work", DURABLE_TEST_POLL_SECONDS=str(poll))
    workers.wait_started(worker)
    deadline = timezone.now() + timedelta(seconds=8)
    pending = api.enqueue("tests.noop", {}, deadline=deadline)
    sleeping = api.enqueue("tests.sleeper", {"seconds": 3600}, queue="work", deadline=deadline)
    parent = api.enqueue(
        "tests.spawn_one",
        {"function": "tests.slow", "input": {"seconds": 60, "tag": "child"}, "options": {"queue": "work"}},
        queue="work",
        deadline=deadline,
    )
    running = api.enqueue("tests.slow", {"seconds": 60, "tag": "running"}, queue="work", deadline=deadline)
    wait_until(lambda: effects.exists("slow-started-child"), message="the child to run")
    wait_until(lambda: effects.exists("slow-started-running"), message="the running run to run")
    # The sleeper's suspension may still be landing while the slow runs start.
    wait_until(
        lambda: (status(sleeping.run_id), status(parent.run_id)) == ("waiting", "waiting"),
        message="the sleeper and the parent to wait",
    )
    assert status(pending.run_id) == "pending"
    assert timezone.now() < deadline, "the machine was too slow to set the scene before the deadline"
    [(child,)] = sql("SELECT run_id FROM durable_run WHERE parent_run_id = %s", [parent.run_id])
    ended = [pending, sleeping, parent, running]
    wait_until(lambda: {status(run.run_id) for run in ended} == {"failed"}, timeout=60, message="the deadline")
    for run in ended:
        late = api.get_run(run.run_id)
        assert late.error_type == DEADLINE_EXCEEDED, (run.name, late.error)
        assert late.finished_at - deadline < timedelta(seconds=max(poll, 5)), (run.name, late.finished_at)
        assert late.leased_until is None
    wait_until(lambda: status(child) == "cancelled", timeout=60, message="the child to be cancelled")
    assert worker.poll() is None


def test_a_timed_out_attempt_is_landed_by_its_holder_never_reclaimed_by_an_idle_worker(workers):
    # A short lease puts heartbeats inside every attempt; idle slots on both workers wake at each lease's end.
    sync_runs = [api.enqueue("tests.stuck", {"seconds": 2, "n": n}) for n in range(3)]  # two attempts each
    async_runs = [api.enqueue("tests.async_stuck", {"n": n}) for n in range(3)]  # one attempt each
    for _ in range(2):
        workers.start("--concurrency", "6", "--max-abandoned", "50", DURABLE_TEST_LEASE_SECONDS="1.5")
    everything = sync_runs + async_runs
    wait_until(
        lambda: {status(run.run_id) for run in everything} == {"failed"}, timeout=90, message="every run to time out"
    )
    with open(effects._path("stuck-attempt")) as handle:
        sync_attempts = [line.split()[0] for line in handle.read().splitlines()]
    with open(effects._path("async-stuck-started")) as handle:
        async_starts = handle.read().split()
    for run in sync_runs:
        ended = api.get_run(run.run_id)
        assert (ended.error_type, ended.failures, ended.attempts, ended.recoveries) == (TIMED_OUT, 2, 2, 0)
        assert sync_attempts.count(run.run_id) == 2
    for run in async_runs:
        ended = api.get_run(run.run_id)
        assert (ended.error_type, ended.failures, ended.attempts, ended.recoveries) == (TIMED_OUT, 1, 1, 0)
        assert async_starts.count(run.run_id) == 1


def test_a_reclaim_after_a_timeout_its_stalled_holder_never_landed_counts_against_the_retry_budget(workers):
    run = api.enqueue("tests.stuck_once", {})  # one attempt, a 1 s timeout
    holder = workers.start("--concurrency", "1", DURABLE_TEST_LEASE_SECONDS="2")
    wait_until(lambda: effects.count("stuck-attempt") == 1, timeout=60, message="the attempt to start")
    os.kill(holder.pid, signal.SIGSTOP)  # before its timeout: it will never land it
    try:
        workers.start("--concurrency", "2", DURABLE_TEST_LEASE_SECONDS="2")
        wait_until(lambda: status(run.run_id) == "failed", timeout=60, message="the reclaim to fail the run")
    finally:
        os.kill(holder.pid, signal.SIGCONT)
    ended = api.get_run(run.run_id)
    assert (ended.error_type, ended.failures, ended.attempts) == (TIMED_OUT, 1, 2)
    assert "outlived its timeout of 1s" in ended.error
    assert effects.count("stuck-attempt") == 1  # the only allowed attempt ran once, never again
