"""Readers that start while a writer commits: each subscribes before it reads, so none misses the write."""

import asyncio
import random
import threading
import time

import pytest
from django.db import connections

from durable_django import api, aread_stream, faults, read_stream
from durable_django.api import streams as stream_api
from durable_django.api import wakeups
from durable_django.engine import lifecycle
from durable_django.engine.context import Context
from durable_django.testing import make_due, run_until_idle

pytestmark = pytest.mark.django_db(transaction=True)

READERS = 8
ROUNDS = 40


def claim_one():
    bounds = lifecycle.claim_bounds(functions=["tests.slow"], queues=None, tenant_id=None)
    [attempt] = lifecycle.claim(limit=1, start_now=1, worker_id="race-writer", bounds=bounds)
    return attempt


def test_a_reader_started_as_an_item_commits_gets_it_without_waiting_for_a_poll(monkeypatch):
    # No safety re-read: a reader that read before it listened, and missed the write, would wait out its timeout.
    monkeypatch.setattr(stream_api, "LISTENING_RECHECK_SECONDS", 600.0)
    run = api.enqueue("tests.slow", {"seconds": 60})
    ctx = Context(claim_one())
    start = threading.Barrier(READERS + 1)
    got: dict[int, list[int]] = {n: [] for n in range(READERS)}
    failures: list[BaseException] = []

    def reader(n):
        for round_number in range(ROUNDS):
            start.wait()
            try:
                item = next(iter(read_stream(run.run_id, "race", after=round_number - 1, timeout=10)))
                got[n].append(item.offset)
            except BaseException as exc:  # noqa: BLE001 - reported below
                failures.append(exc)

    threads = [threading.Thread(target=reader, args=(n,), daemon=True) for n in range(READERS)]
    for thread in threads:
        thread.start()
    try:
        for round_number in range(ROUNDS):
            start.wait()
            # Commit while the readers are subscribing and reading for the first time.
            threading.Event().wait(random.uniform(0, 0.003))
            ctx.write_stream("race", round_number)
        for thread in threads:
            thread.join(60)
    finally:
        connections.close_all()
    assert failures == []
    assert all(offsets == list(range(ROUNDS)) for offsets in got.values()), got
    api.cancel(run.run_id)
    make_due(run.run_id)
    run_until_idle()


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_an_item_committed_between_a_readers_read_and_its_wait_wakes_it(monkeypatch, asynchronous):
    monkeypatch.setattr(stream_api, "LISTENING_RECHECK_SECONDS", 600.0)
    run = api.enqueue("tests.slow", {"seconds": 60})
    ctx = Context(claim_one())
    ctx.write_stream("gap", "before")
    # The process's LISTEN session is up already (its first LISTEN wakes every reader, which would hide a miss).
    warm = wakeups.ThreadWaiter()
    wakeups.hub.subscribe(run.run_id, warm)
    assert wakeups.hub.wait_listening()
    wakeups.hub.unsubscribe(run.run_id, warm)

    def write_in_the_gap():
        # Another thread commits the item after the reader's read, before it waits, and the reader goes on only
        # once the NOTIFY has reached the process's LISTEN session: the hub wakes every waiter of the run, a
        # probe of this thread's among them.
        probe = wakeups.ThreadWaiter()
        wakeups.hub.subscribe(run.run_id, probe)
        try:
            writer = threading.Thread(target=lambda: (ctx.write_stream("gap", "in the gap"), connections.close_all()))
            writer.start()
            writer.join()
            assert probe.event.wait(30), "the write's NOTIFY never reached the process's LISTEN session"
        finally:
            wakeups.hub.unsubscribe(run.run_id, probe)

    async def read_async():
        items = []
        async for item in aread_stream(run.run_id, "gap", timeout=30):
            items.append(item.value)
            if len(items) == 2:
                break
        return items

    def read_sync():
        items = []
        for item in read_stream(run.run_id, "gap", timeout=30):
            items.append(item.value)
            if len(items) == 2:
                break
        return items

    began = time.monotonic()
    with faults.injected("stream.read", write_in_the_gap):
        values = asyncio.run(read_async()) if asynchronous else read_sync()
    assert values == ["before", "in the gap"]
    # Woken by the write (a missed wake-up would wait out the 30 s timeout before reading again).
    assert time.monotonic() - began < 5.0
    api.cancel(run.run_id)
    make_due(run.run_id)
    run_until_idle()
