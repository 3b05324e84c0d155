"""A PostgreSQL of a test's own that listens by TCP on the addresses the test names, and on a Unix socket.

The suite's server listens on its socket only, which every process on the
machine shares whatever its network namespace; a worker on another (simulated)
host must come by TCP. pgserver initialises and first starts the server (as the
user it creates when we are root); it is then restarted listening on the given
addresses and a free port, with ``trust`` for the given networks. In CI a
missing pgserver fails the test instead of skipping it.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from subprocess import CalledProcessError

import psycopg
import pytest

from durable_django.testing import _runtime_dir
from tests.helpers import free_port

USER = "postgres"
DATABASE = "postgres"


@dataclass(frozen=True)
class TcpServer:
    port: int
    socket_dir: str

    def url(self, address: str = "127.0.0.1") -> str:
        """A DATABASE_URL over TCP to ``address``."""
        return f"postgres://{USER}@{address}:{self.port}/{DATABASE}"

    def connect(self) -> psycopg.Connection:
        return psycopg.connect(host=self.socket_dir, port=self.port, user=USER, dbname=DATABASE, autocommit=True)


@contextmanager
def tcp_server(addresses: Sequence[str], trusted_networks: Sequence[str] = ()) -> Iterator[TcpServer]:
    """A fresh server listening on 127.0.0.1 and ``addresses``; stopped and deleted on the way out."""
    try:
        # As the session's own server is started: without XDG_RUNTIME_DIR, importing pgserver warns, and a
        # warning is an error here. A pytest-xdist worker may import it first, here.
        with _runtime_dir():
            import pgserver
            from pgserver._commands import pg_ctl
    except ImportError:
        reason = "a server listening by TCP needs pgserver"
        if os.environ.get("CI"):
            pytest.fail(f"{reason}; CI must run this test")
        pytest.skip(reason)
    # pgserver is left nothing to clean up: it would look for the server it started, which the restart replaced.
    server = pgserver.get_server(tempfile.mkdtemp(prefix="durable-pg-tcp-"), cleanup_mode=None)
    pgdata: Path = server.pgdata
    started = False
    try:
        pg_ctl(["-w", "-m", "fast", "stop"], pgdata=pgdata, user=server.system_user)
        with open(pgdata / "pg_hba.conf", "a") as hba:
            hba.writelines(f"host all all {network} trust\n" for network in trusted_networks)
        port = free_port()
        listen = ",".join(["127.0.0.1", *addresses])
        pg_ctl(
            ["-w", "-o", f"-h {listen} -p {port} -k {pgdata}", "-l", str(pgdata / "log"), "start"],
            pgdata=pgdata,
            user=server.system_user,
            timeout=30,
        )
        started = True
        yield TcpServer(port=port, socket_dir=str(pgdata))
    finally:
        if started:
            with suppress(CalledProcessError):
                pg_ctl(["-w", "-m", "immediate", "stop"], pgdata=pgdata, user=server.system_user)
        server.cleanup()
        shutil.rmtree(pgdata, ignore_errors=True)
