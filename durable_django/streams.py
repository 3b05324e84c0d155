"""Server-sent events from a run's stream: ``stream_response(request, run_id, key)`` for a Django view.

```python
from durable_django.streams import stream_response

def tokens(request, run_id):
    return stream_response(request, run_id, "tokens")   # the view decides who may read
```

Each item is one event, ``id: {offset}`` and ``data: {JSON}``; a browser's
``EventSource`` that reconnects sends the last id it saw (``Last-Event-ID``) and
the stream resumes after it. When the stream ends (closed, or its run finished
and all of it sent) an ``event: end`` follows and the response closes. While
nothing is written, a comment line goes out every ``keepalive`` seconds, so
proxies do not cut an idle stream.

Under ASGI the response iterates asynchronously and holds no thread while it
waits (``api.wakeups``: one LISTEN session per process wakes every waiting
response); under WSGI it iterates in the request's thread. A client that goes away ends
the iteration (the server closes it) and its reader with it.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from uuid import UUID

from django.core.handlers.asgi import ASGIRequest
from django.http import Http404, HttpRequest, HttpResponseBadRequest, StreamingHttpResponse

from .api.streams import aread_stream_ticking, read_stream_ticking, stream_is_readable
from .exceptions import InvalidInput, RunNotFound
from .types import StreamItem

__all__ = ["stream_response"]

KEEPALIVE_SECONDS = 15.0

_END = b"event: end\ndata: {}\n\n"
_KEEPALIVE = b": keep-alive\n\n"


def stream_response(
    request: HttpRequest,
    run_id: str | UUID,
    key: str,
    *,
    tenant_id: str | UUID | None = None,
    keepalive: timedelta | float = KEEPALIVE_SECONDS,
) -> StreamingHttpResponse | HttpResponseBadRequest:
    """A ``text/event-stream`` response of the run's stream ``key``, resumed after ``Last-Event-ID``.

    Args:
        request: the request being answered (its ``Last-Event-ID`` header, and whether it came by ASGI).
        run_id: the run whose stream is sent.
        key: the stream's key.
        tenant_id: read only a run of this tenant (None: any run; the view decides who may read).
        keepalive: seconds (or a timedelta) of silence after which a comment line is sent.

    Raises:
        Http404: no such run is visible to ``tenant_id``.
    """
    last_event_id = request.headers.get("Last-Event-ID", "").strip()
    try:
        after = int(last_event_id) if last_event_id else -1
        pause = keepalive.total_seconds() if isinstance(keepalive, timedelta) else float(keepalive)
        if not stream_is_readable(run_id, key, tenant_id=tenant_id):
            raise Http404(f"no run {run_id}")
    except (ValueError, InvalidInput) as exc:
        return HttpResponseBadRequest(f"cannot stream this: {exc}", content_type="text/plain")
    content = (
        _async_events(run_id, key, after, tenant_id, pause)
        if isinstance(request, ASGIRequest)
        else _sync_events(run_id, key, after, tenant_id, pause)
    )
    response = StreamingHttpResponse(content, content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # nginx: pass each event on as it comes
    return response


def _event(item: StreamItem) -> bytes:
    data = json.dumps(item.value, separators=(",", ":"), ensure_ascii=False)
    return f"id: {item.offset}\ndata: {data}\n\n".encode()


async def _async_events(
    run_id: str | UUID, key: str, after: int, tenant_id: str | UUID | None, keepalive: float
) -> AsyncIterator[bytes]:
    items = aread_stream_ticking(run_id, key, after=after, tenant_id=tenant_id, tick=keepalive)
    try:
        async for item in items:
            yield _KEEPALIVE if item is None else _event(item)
    except RunNotFound:  # purged while it was read
        pass
    finally:
        await items.aclose()
    yield _END


def _sync_events(
    run_id: str | UUID, key: str, after: int, tenant_id: str | UUID | None, keepalive: float
) -> Iterator[bytes]:
    items = read_stream_ticking(run_id, key, after=after, tenant_id=tenant_id, tick=keepalive)
    try:
        for item in items:
            yield _KEEPALIVE if item is None else _event(item)
    except RunNotFound:  # purged while it was read
        pass
    finally:
        items.close()
    yield _END
