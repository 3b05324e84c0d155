"""The HTTP server of a worker's metrics port: ``GET /metrics`` and nothing else.

prometheus_client's own server answers the metrics on every path and logs nothing;
this one answers 404 anywhere but ``/metrics``, so a scanner or a mistyped URL learns
nothing and a proxy's health probe of another path does not cost a scrape.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app

METRICS_PATH = "/metrics"

StartResponse = Callable[..., Any]


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    """A thread per scrape, none of which keeps the process alive."""

    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    """No line on stderr per request (the worker's log is for its runs)."""

    def log_message(self, format: str, *args: Any) -> None:
        pass


def only_metrics(app: Callable[[dict[str, Any], StartResponse], Iterable[bytes]]) -> Callable[..., Iterable[bytes]]:
    """The WSGI app, answering 404 on every path but METRICS_PATH."""

    def serve(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        if environ.get("PATH_INFO") != METRICS_PATH:
            start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
            return [f"Not found: the metrics are at {METRICS_PATH}\n".encode()]
        return app(environ, start_response)

    return serve


def start(address: str, port: int, registry: CollectorRegistry) -> WSGIServer:
    """Serve the registry on (address, port) from a daemon thread.

    Raises:
        OSError: the address does not resolve, or the port cannot be bound (in use, or not allowed).
    """
    family, _, _, _, sockaddr = socket.getaddrinfo(address, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]

    class Server(_ThreadingServer):
        address_family = family

    server = make_server(
        str(sockaddr[0]), port, only_metrics(make_wsgi_app(registry)), Server, handler_class=_QuietHandler
    )
    threading.Thread(target=server.serve_forever, name="durable-metrics", daemon=True).start()
    return server
