"""run_until_idle() from an async test: through ``sync_to_async`` as Django's docs call sync code, either way.

An async test runs its event loop either under ``async_to_sync`` (Django's
``async def`` test methods) or in the test's thread (pytest-asyncio and the
like). It calls ``run_until_idle`` through ``sync_to_async``: by default
thread-sensitive, or with ``thread_sensitive=False``. Every combination runs
the async handler's ORM calls to their end, on the real database.
"""

import asyncio
from concurrent.futures import ThreadPoolExecutor

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from django.contrib.auth.models import User
from django.db import connections

from durable_django import api
from durable_django.testing import run_until_idle

pytestmark = pytest.mark.django_db(transaction=True)


async def drain_from_async(thread_sensitive):
    """Enqueue and drain as an async test would; returns (run id, attempts executed)."""
    run = await sync_to_async(api.enqueue)("tests.async_orm", {"prefix": "async-test-"})
    if thread_sensitive:
        executed = await sync_to_async(run_until_idle)()
    else:
        with ThreadPoolExecutor(max_workers=1) as thread:
            executed = await sync_to_async(run_until_idle, thread_sensitive=False, executor=thread)()
            thread.submit(connections.close_all).result()
    # Without an outer async_to_sync, thread-sensitive calls run on a thread that outlives the test.
    await sync_to_async(connections.close_all)()
    return run.run_id, executed


def django_async_test(thread_sensitive):
    """As Django runs an ``async def`` test method: under async_to_sync."""
    return async_to_sync(drain_from_async)(thread_sensitive)


def loop_in_the_test_thread(thread_sensitive):
    """As pytest-asyncio runs a test: an event loop in the test's thread."""
    return asyncio.run(drain_from_async(thread_sensitive))


LOOPS = {"django-async-test": django_async_test, "loop-in-the-test-thread": loop_in_the_test_thread}


@pytest.mark.parametrize("loop", sorted(LOOPS))
@pytest.mark.parametrize("thread_sensitive", [True, False], ids=["thread-sensitive", "not-thread-sensitive"])
def test_run_until_idle_through_sync_to_async_runs_an_async_handlers_orm_calls(loop, thread_sensitive):
    User.objects.create(username="async-test-one")
    User.objects.create(username="someone-else")
    run_id, executed = LOOPS[loop](thread_sensitive)
    run = api.get_run(run_id)
    assert (run.status, run.error) == ("succeeded", None)
    assert run.output == {"in_step": 2, "outside": 1}
    assert executed == 1


def test_run_until_idle_from_sync_code_still_runs_an_async_handler():
    User.objects.create(username="async-test-two")
    run = api.enqueue("tests.async_orm", {"prefix": "async-test-"})
    assert run_until_idle() == 1
    assert api.get_run(run.run_id).output == {"in_step": 1, "outside": 1}
