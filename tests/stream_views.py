"""Views that serve runs' streams as server-sent events, for the tests (the view decides who may read)."""

from durable_django.streams import stream_response


def tokens(request, run_id):
    return stream_response(request, run_id, "tokens", keepalive=float(request.GET.get("keepalive", 15)))
