"""Worker hosts for the scale-out test: a network namespace each where the machine allows, else plain processes.

As root with iproute2, each host is a network namespace joined to this one by a
veth pair of its own, with addresses from 198.18.0.0/15 (the range RFC 2544 sets
aside for such tests): a worker started there reaches PostgreSQL by TCP over its
own interface, from its own address, and (in a UTS namespace as well) under a
hostname of its own, as on another machine. Namespaces and links are named after
this process, so runs at once do not meet, and ones a killed test left behind are
removed at the next start. Without namespaces, hosts are simulated: separate
processes whose connections differ (TCP or the server's socket, and each its own
``application_name``).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from urllib.parse import quote

# What a host's worker connects through when it has no address of its own.
LOOPBACK = "127.0.0.1"
SOCKET = "socket"

_OURS = re.compile(r"^durable-scale-(\d+)-\d+\b")


@dataclass(frozen=True)
class Host:
    """One simulated machine: its name, and how its worker reaches the server."""

    name: str
    # The address PostgreSQL listens on for this host (LOOPBACK), or SOCKET for its Unix socket.
    server_address: str
    # The address the server sees this host's connections come from; None over the socket.
    client_address: str | None
    namespace: str | None = None

    def prefix(self) -> list[str]:
        """What runs a command on this host: its namespaces, its hostname, the same pid (each execs the next)."""
        if self.namespace is None:
            return []
        return [
            *("ip", "netns", "exec", self.namespace),
            *("unshare", "--uts"),
            *("sh", "-c", 'hostname "$0" && exec "$@"', self.name),
        ]

    def database_url(self, *, port: int, socket_dir: str, user: str, database: str) -> str:
        """A DATABASE_URL for this host's worker, naming the host as its ``application_name``."""
        if self.server_address == SOCKET:
            return f"postgres://{user}@:{port}/{database}?host={quote(socket_dir)}&application_name={self.name}"
        return f"postgres://{user}@{self.server_address}:{port}/{database}?application_name={self.name}"


def namespaces_unavailable() -> str | None:
    """Why this machine cannot give each host a network namespace, or None when it can."""
    if os.name != "posix" or os.geteuid() != 0:
        return "network namespaces need root"
    missing = [tool for tool in ("ip", "unshare", "hostname") if shutil.which(tool) is None]
    if missing:
        return f"no {', '.join(missing)} on PATH (iproute2, util-linux, hostname)"
    probe = subprocess.run(["unshare", "--net", "--uts", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"cannot create namespaces here: {probe.stderr.strip()}"
    return None


def subnet() -> str:
    """The /24 this process's hosts take their addresses from (for the server's pg_hba.conf)."""
    return f"198.18.{os.getpid() % 256}.0/24"


@contextmanager
def network_namespaces(names: Sequence[str]) -> Iterator[list[Host]]:
    """One namespace per name, each with a veth pair to this namespace; all removed on the way out."""
    _remove_abandoned()
    pid = os.getpid()
    octet = pid % 256
    made: list[tuple[str, str]] = []
    try:
        hosts = []
        for index, name in enumerate(names):
            namespace, outside, inside = f"durable-scale-{pid}-{index}", f"dd{pid}h{index}", f"dd{pid}n{index}"
            server, client = f"198.18.{octet}.{4 * index + 1}", f"198.18.{octet}.{4 * index + 2}"
            _ip("netns", "add", namespace)
            made.append((namespace, outside))
            _ip("link", "add", outside, "type", "veth", "peer", "name", inside, "netns", namespace)
            _ip("addr", "add", f"{server}/30", "dev", outside)
            _ip("link", "set", outside, "up")
            _ip("-n", namespace, "addr", "add", f"{client}/30", "dev", inside)
            _ip("-n", namespace, "link", "set", inside, "up")
            _ip("-n", namespace, "link", "set", "lo", "up")
            hosts.append(Host(name, server_address=server, client_address=client, namespace=namespace))
        yield hosts
    finally:
        for namespace, outside in made:
            _remove(namespace, outside)


def simulated(names: Sequence[str]) -> list[Host]:
    """Hosts without namespaces: alternately over TCP on the loopback and over the server's Unix socket."""
    return [
        Host(name, server_address=SOCKET, client_address=None)
        if index % 2
        else Host(name, server_address=LOOPBACK, client_address=LOOPBACK)
        for index, name in enumerate(names)
    ]


def _ip(*args: str) -> None:
    result = subprocess.run(["ip", *args], capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {result.stderr.strip()}")


def _remove(namespace: str, outside: str) -> None:
    """Deleting the outside end deletes its peer; the namespace goes once no process is left in it."""
    subprocess.run(["ip", "link", "del", outside], capture_output=True)
    subprocess.run(["ip", "netns", "del", namespace], capture_output=True)


def _remove_abandoned() -> None:
    """Namespaces of test processes that died before their cleanup (a SIGKILL, a power cut)."""
    listing = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    for line in listing.splitlines():
        match = _OURS.match(line)
        if match and not os.path.exists(f"/proc/{match.group(1)}"):
            owner, index = match.group(0).rsplit("-", 2)[1:]
            _remove(match.group(0), f"dd{owner}h{index}")
