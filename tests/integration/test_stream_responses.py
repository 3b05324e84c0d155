"""stream_response(): server-sent events under WSGI (the test client) and ASGI (Django's handler, in-process)."""

import asyncio
import itertools
import sys
import threading
import uuid

import pytest
from django.core.handlers.asgi import ASGIHandler
from django.db import connections
from django.test import Client

from durable_django import api, faults
from durable_django.engine import lifecycle
from durable_django.engine.context import Context
from durable_django.testing import make_due, run_until_idle
from tests.helpers import sql

pytestmark = pytest.mark.django_db(transaction=True)

WORDS = ["one", "two", "three"]


def events(body: bytes) -> list[dict]:
    parsed = []
    for block in body.decode().split("\n\n"):
        fields = {}
        for line in block.splitlines():
            name, _, value = line.partition(": ")
            fields[name] = value
        if fields:
            parsed.append(fields)
    return parsed


def finished_run(words=WORDS):
    run = api.enqueue("tests.stream_words", {"words": words})
    run_until_idle()
    return run


def test_each_item_is_an_event_with_its_offset_and_the_stream_ends_with_an_end_event():
    run = finished_run()
    response = Client().get(f"/runs/{run.run_id}/tokens")
    assert response.status_code == 200 and response["Content-Type"] == "text/event-stream"
    assert response["Cache-Control"] == "no-cache"
    assert events(b"".join(response.streaming_content)) == [
        {"id": "0", "data": '"one"'},
        {"id": "1", "data": '"two"'},
        {"id": "2", "data": '"three"'},
        {"event": "end", "data": "{}"},
    ]


def test_a_reconnect_resumes_after_last_event_id():
    run = finished_run()
    response = Client().get(f"/runs/{run.run_id}/tokens", HTTP_LAST_EVENT_ID="1")
    assert events(b"".join(response.streaming_content)) == [
        {"id": "2", "data": '"three"'},
        {"event": "end", "data": "{}"},
    ]
    assert Client().get(f"/runs/{run.run_id}/tokens", HTTP_LAST_EVENT_ID="not a number").status_code == 400
    assert Client().get(f"/runs/{uuid.uuid4()}/tokens").status_code == 404


def claim_one():
    bounds = lifecycle.claim_bounds(functions=["tests.slow"], queues=None, tenant_id=None)
    [attempt] = lifecycle.claim(limit=1, start_now=1, worker_id="sse-writer", bounds=bounds)
    return attempt


def test_an_idle_stream_sends_keep_alive_comments_while_it_waits():
    run = api.enqueue("tests.slow", {"seconds": 60})
    ctx = Context(claim_one())
    response = Client().get(f"/runs/{run.run_id}/tokens?keepalive=0.2")
    chunks = iter(response.streaming_content)
    assert next(chunks) == b": keep-alive\n\n"
    ctx.write_stream("tokens", "late")
    assert next(c for c in chunks if c != b": keep-alive\n\n") == b'id: 0\ndata: "late"\n\n'
    ctx.close_stream("tokens")
    assert list(chunks)[-1] == b"event: end\ndata: {}\n\n"
    api.cancel(run.run_id)
    make_due(run.run_id)
    run_until_idle()


class AsgiClient:
    """One request through Django's ASGI handler, in this process: its status and the body parts it sent."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.status: int | None = None
        self.body: list[bytes] = []
        self.disconnect = asyncio.Event()

    async def __call__(self, app) -> None:
        scope = {
            "type": "http",
            "method": "GET",
            "path": self.path,
            "query_string": b"",
            "headers": [],
            "scheme": "http",
            "server": ("testserver", 80),
            "client": ("127.0.0.1", 1),
            "asgi": {"version": "3.0"},
        }
        sent_request = False

        async def receive():
            nonlocal sent_request
            if not sent_request:
                sent_request = True
                return {"type": "http.request", "body": b"", "more_body": False}
            await self.disconnect.wait()
            return {"type": "http.disconnect"}

        async def send(message):
            if message["type"] == "http.response.start":
                self.status = message["status"]
            elif message.get("body"):
                self.body.append(message["body"])

        await app(scope, receive, send)


def stacks_in_durable_code() -> list[str]:
    """Threads whose stack is inside this package's code, but for the process's LISTEN thread."""
    names = {thread.ident: thread.name for thread in threading.enumerate()}
    found = []
    for ident, frame in sys._current_frames().items():
        if names.get(ident) == "durable-stream-listen" or ident == threading.get_ident():
            continue
        while frame is not None:
            if "/durable_django/" in frame.f_code.co_filename:
                found.append(f"{names.get(ident)}: {frame.f_code.co_filename}:{frame.f_lineno}")
                break
            frame = frame.f_back
    return found


READERS = 50


def closing(fn, *args):
    """``fn(*args)`` on an executor's thread, which then closes its connections (nobody else would)."""
    try:
        return fn(*args)
    finally:
        connections.close_all()


def connections_of_this_process() -> int:
    [(count,)] = sql("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()")
    return count


def test_fifty_asgi_readers_wait_holding_no_thread_and_a_bounded_number_of_connections():
    run = api.enqueue("tests.slow", {"seconds": 60})
    ctx = Context(claim_one())
    connections_before = connections_of_this_process()
    app = ASGIHandler()
    clients = [AsgiClient(f"/runs/{run.run_id}/tokens") for _ in range(READERS)]
    seen: dict[str, object] = {}

    async def serve():
        loop = asyncio.get_running_loop()
        all_wait = asyncio.Event()
        reads = itertools.count(1)

        def read_and_about_to_wait():
            if next(reads) == READERS:
                loop.call_soon_threadsafe(all_wait.set)

        with faults.injected("stream.read", read_and_about_to_wait):
            tasks = [asyncio.create_task(client(app)) for client in clients]
            # Every reader has read (nothing yet) and waits.
            await asyncio.wait_for(all_wait.wait(), 60)
            # The last read's thread returns just after its fault point fired: give it a moment to leave.
            # A reader that held a thread while it waits never leaves, and the check fails.
            settle = loop.time() + 5
            while (in_durable_code := stacks_in_durable_code()) and loop.time() < settle:
                await asyncio.sleep(0.02)
            seen["threads in durable code"] = in_durable_code
            seen["connections"] = await asyncio.to_thread(closing, connections_of_this_process)
            await asyncio.to_thread(closing, ctx.write_stream, "tokens", "for all")
            await asyncio.to_thread(closing, ctx.close_stream, "tokens")
            await asyncio.wait_for(asyncio.gather(*tasks), 60)

    asyncio.run(serve())
    assert all(client.status == 200 for client in clients)
    assert seen["threads in durable code"] == []
    # One LISTEN session and a few read sessions serve them all (and the writer's own connection).
    assert seen["connections"] - connections_before <= 6, seen
    for client in clients:
        assert events(b"".join(client.body)) == [{"id": "0", "data": '"for all"'}, {"event": "end", "data": "{}"}]
    api.cancel(run.run_id)
    make_due(run.run_id)
    run_until_idle()
