"""The worker's slot pool and heartbeat around the attempts they hold: a beat that fails, and two attempts
of one run held at once."""

import threading

import pytest
from django.test import override_settings

from durable_django import api
from durable_django.engine import lifecycle
from durable_django.worker.heartbeat import Heartbeat
from durable_django.worker.slots import SlotPool
from tests.helpers import sql, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

BOUNDS = lifecycle.claim_bounds(functions=None, queues=None, tenant_id=None)


def claim_one(**options):
    [attempt] = lifecycle.claim(limit=1, start_now=1, worker_id=options.pop("worker_id", "test"), bounds=BOUNDS)
    return attempt


def test_the_heartbeat_thread_outlives_an_error_in_one_beat():
    class FlakyHeartbeat(Heartbeat):
        beats = 0

        def beat(self):
            FlakyHeartbeat.beats += 1
            if FlakyHeartbeat.beats == 1:
                raise RuntimeError("a bug in one beat")
            super().beat()

    api.enqueue("tests.noop", {})
    attempt = claim_one()
    pool, halt = SlotPool(1), threading.Event()
    pool.add([attempt])
    before = api.get_run(attempt.run.run_id).leased_until
    with override_settings(DURABLE={"LEASE_SECONDS": 0.3}):
        heartbeat = FlakyHeartbeat(pool, halt, lambda reachable: None)
        heartbeat.start()
        try:
            wait_until(lambda: FlakyHeartbeat.beats >= 3, timeout=10, message="beats after the failing one")
        finally:
            halt.set()
            heartbeat.join(5)
    assert api.get_run(attempt.run.run_id).leased_until != before


def test_two_attempts_of_one_run_in_one_worker_are_told_apart():
    """A worker reclaims its own expired run while the old attempt still blocks: each keeps its own place."""
    api.enqueue("tests.noop", {})
    old = lifecycle.claim(limit=1, start_now=1, worker_id="w", bounds=BOUNDS)[0]
    sql("UPDATE durable_run SET leased_until = now() - interval '1 second'")
    new = claim_one(worker_id="w")
    assert (old.run.run_id, old.token + 1) == (new.run.run_id, new.token)
    pool = SlotPool(2)
    pool.add([old, new])
    assert pool.take(0) is old and pool.take(1) is new
    pool.done(0, old)  # the old attempt ends: the new one must stay held
    assert pool.held() == [new]
    Heartbeat(pool, threading.Event(), lambda reachable: None).beat()
    assert not new.lost and api.get_run(new.run.run_id).leased_until is not None
