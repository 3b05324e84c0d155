"""A real PgBouncer in transaction pooling mode in front of the test server, for the tests that need one.

It is Debian's ``pgbouncer`` package (1.18: no prepared statement support),
which CI's script installs. PgBouncer refuses to run as root, so a root test
process (CI's) starts it as the user that owns the server's socket directory:
that user can reach the socket (it is ``pgserver`` for the embedded server,
``postgres`` for Debian's own), and owns nothing of the test process. A server
reached over TCP needs no such user: ``nobody`` does. Not as root, PgBouncer
runs as the test process's own user.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from tests.helpers import free_port

# Server sessions per (database, user) pair. Each test process runs a PgBouncer of its own.
POOL_SIZE = 20
START_SECONDS = 30.0


def executable() -> str:
    """Debian installs PgBouncer in /usr/sbin, which is not on every user's PATH."""
    found = shutil.which("pgbouncer") or shutil.which("pgbouncer", path="/usr/sbin:/usr/local/sbin")
    if found is None:
        reason = "no pgbouncer executable (apt-get install pgbouncer)"
        if os.environ.get("CI") or os.environ.get("DURABLE_TEST_PGBOUNCER") == "1":
            pytest.fail(f"{reason}; CI must run the PgBouncer tests")
        pytest.skip(reason)
    return found


def run_as(server_host: str) -> pwd.struct_passwd | None:
    """The user to run PgBouncer as: None (ourselves) unless we are root, which PgBouncer refuses."""
    if os.geteuid() != 0:
        return None
    if server_host.startswith("/"):
        owner = pwd.getpwuid(os.stat(server_host).st_uid)
        if owner.pw_uid != 0:
            return owner
    return pwd.getpwnam("nobody")


@dataclass
class PgBouncer:
    """A running PgBouncer: clients connect to 127.0.0.1:``port`` with the server's database names and user."""

    port: int
    process: subprocess.Popen[bytes]
    directory: Path

    @classmethod
    def start(cls, server: dict) -> PgBouncer:
        """Start one in front of the server a Django ``settings_dict`` names, and wait until it answers."""
        host = server["HOST"] or server["OPTIONS"].get("host") or "/var/run/postgresql"
        server_port = server["PORT"] or "5432"
        user = server["USER"] or "postgres"
        password = server["PASSWORD"] or ""
        port = free_port()
        directory = Path(tempfile.mkdtemp(prefix="durable-pgbouncer-"))
        (directory / "users.txt").write_text(f'"{user}" "{password}"\n')
        (directory / "pgbouncer.ini").write_text(
            f"""[databases]
* = host={host} port={server_port}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = trust
auth_file = {directory}/users.txt
pool_mode = transaction
default_pool_size = {POOL_SIZE}
max_client_conn = 1000
logfile = {directory}/pgbouncer.log
log_connections = 0
log_disconnections = 0
"""
        )
        owner = run_as(host)
        if owner is not None:
            for path in (directory, *directory.iterdir()):
                os.chown(path, owner.pw_uid, owner.pw_gid)
        output = (directory / "output.log").open("wb")
        process = subprocess.Popen(
            [executable(), str(directory / "pgbouncer.ini")],
            stdout=output,
            stderr=subprocess.STDOUT,
            **({"user": owner.pw_uid, "group": owner.pw_gid, "extra_groups": []} if owner else {}),
        )
        output.close()
        bouncer = cls(port=port, process=process, directory=directory)
        bouncer.wait_until_it_answers(database=server["NAME"], user=user, password=password)
        return bouncer

    def wait_until_it_answers(self, *, database: str, user: str, password: str) -> None:
        deadline = time.monotonic() + START_SECONDS
        while True:
            try:
                with psycopg.connect(
                    host="127.0.0.1", port=self.port, dbname=database, user=user, password=password, connect_timeout=2
                ) as conn:
                    conn.execute("SELECT 1")
                return
            except psycopg.OperationalError as exc:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"PgBouncer did not start ({exc}):\n{self.log()}") from exc
                time.sleep(0.05)

    def log(self) -> str:
        return "".join(
            path.read_text(errors="replace")
            for path in (self.directory / "output.log", self.directory / "pgbouncer.log")
            if path.exists()
        )

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)  # PgBouncer's immediate shutdown
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.directory, ignore_errors=True)


@contextmanager
def routed(bouncer: PgBouncer, alias: str) -> Iterator[None]:
    """``alias`` reaches its database through ``bouncer`` until the block ends.

    Django's connections of every thread share the alias's ``settings_dict``, so
    changing it in place routes each one at its next connect.
    """
    from django.db import connections

    settings_dict = connections[alias].settings_dict
    saved = {key: settings_dict[key] for key in ("HOST", "PORT", "OPTIONS")}
    settings_dict.update(
        HOST="127.0.0.1",
        PORT=str(bouncer.port),
        OPTIONS={key: value for key, value in settings_dict["OPTIONS"].items() if key != "host"},
    )
    connections[alias].close()
    try:
        yield
    finally:
        connections[alias].close()
        settings_dict.update(saved)
