"""Three worker hosts against one PostgreSQL: every run done once, and no step's function run twice.

Each host is a network namespace with a veth pair of its own (tests/hosts.py): its
worker reaches a PostgreSQL of the test's own (tests/tcp_server.py) by TCP, from
its own address, under its own hostname, as a worker on another machine would.
That needs root and iproute2; CI runs as root and there the test fails without
them. Elsewhere the hosts are simulated by separate processes with separate
connection settings: two over TCP on the loopback and one over the server's Unix
socket, each with its own ``application_name``. The checks are the same.

A third of the way through, one host's worker is killed with SIGKILL. A step it
was inside when it died may run again elsewhere (its journal entry may not have
been committed: a step's function runs at least once); any step it had gone past
in that run was journalled before the next began, and must not run again.
"""

import collections
import os
import signal
import socket
import subprocess
import sys

import pytest

from tests.helpers import ROOT, wait_until
from tests.hosts import Host, namespaces_unavailable, network_namespaces, simulated, subnet
from tests.tcp_server import DATABASE, USER, TcpServer, tcp_server
from tests.workflows import effects

pytestmark = [pytest.mark.process, pytest.mark.long]

NAMES = ("host-a", "host-b", "host-c")
RUNS = 2000
STEPS = 3
CONCURRENCY = 4
ENQUEUE = f"""
from django.db import transaction
from durable_django import enqueue
with transaction.atomic():
    for _ in range({RUNS}):
        enqueue("tests.scale_out", {{"steps": {STEPS}}})
"""
# Long enough that no live worker loses a lease on a busy machine; short enough to reclaim the killed one's runs.
WORKER_SETTINGS = {"DURABLE_TEST_LEASE_SECONDS": "6", "DURABLE_TEST_POLL_SECONDS": "1"}


@pytest.fixture
def hosts():
    reason = namespaces_unavailable()
    if reason is None:
        with network_namespaces(NAMES) as namespaced:
            yield namespaced
        return
    if os.environ.get("CI"):
        pytest.fail(f"{reason}; CI must run the scale-out test in network namespaces")
    yield simulated(NAMES)


@pytest.fixture
def server(hosts):
    own = [host.server_address for host in hosts if host.namespace is not None]
    with tcp_server(own, trusted_networks=[subnet()] if own else []) as started:
        yield started


def test_three_hosts_run_every_run_once_and_no_step_twice_though_one_is_killed(hosts, server, workers, effects_dir):
    manage_env = workers.env(DATABASE_URL=server.url())
    manage(manage_env, "migrate", "durable_django", "-v", "0")
    # The runs are enqueued in one transaction while the workers start: each takes them as it comes up.
    enqueuing = subprocess.Popen(
        [sys.executable, "-m", "django", "shell", "-c", ENQUEUE],
        env=manage_env,
        cwd=ROOT,
        stderr=subprocess.PIPE,
        text=True,
    )
    procs = [
        workers.start(
            "--concurrency",
            str(CONCURRENCY),
            prefix=host.prefix(),
            env=workers.env(DATABASE_URL=worker_url(host, server), **WORKER_SETTINGS),
        )
        for host in hosts
    ]
    _, errors = enqueuing.communicate(timeout=120)
    assert enqueuing.returncode == 0, errors

    def under_way():
        done = {proc.pid: effects.count(f"scale-{proc.pid}") for proc in procs}
        return all(done.values()) and sum(done.values()) >= RUNS * STEPS // 3

    wait_until(under_way, timeout=60, interval=0.05, message="every host to run steps, a third of them in all")
    with server.connect() as conn:
        connections = conn.execute(
            "SELECT application_name, host(client_addr) FROM pg_stat_activity WHERE application_name = ANY(%s)",
            [list(NAMES)],
        ).fetchall()
    victim = procs[1]
    victim.send_signal(signal.SIGKILL)
    victim.wait(timeout=10)

    def succeeded():
        with server.connect() as conn:
            return conn.execute("SELECT count(*) FROM durable_run WHERE status = 'succeeded'").fetchone()[0] == RUNS

    wait_until(succeeded, timeout=90, interval=0.2, message="every run to succeed")

    # Each host's worker came from its own address (its namespace's, or the socket), under its own name.
    seen = collections.defaultdict(set)
    for name, address in connections:
        seen[name].add(address)
    assert seen == {host.name: {host.client_address} for host in hosts}
    with server.connect() as conn:
        recorded = dict(conn.execute("SELECT pid, host FROM durable_worker").fetchall())
    expected_names = [host.name if host.namespace else socket.gethostname() for host in hosts]
    assert recorded == {proc.pid: name for proc, name in zip(procs, expected_names, strict=True)}

    # Every run succeeded with its journal complete; runs the killed worker held were recovered once.
    with server.connect() as conn:
        runs = conn.execute("SELECT run_id, status, output, recoveries FROM durable_run").fetchall()
        journalled = conn.execute("SELECT count(*) FROM durable_step").fetchone()[0]
    assert len(runs) == RUNS
    assert {(status, output) for _, status, output, _ in runs} == {("succeeded", sum(range(STEPS)))}
    assert journalled == RUNS * STEPS
    recovered = {run_id for run_id, *_, recoveries in runs if recoveries}
    assert {recoveries for *_, recoveries in runs} <= {0, 1}

    # Every step's function ran; one ran twice only if it was the last the killed worker ran in its run.
    executions = collections.defaultdict(list)
    for proc in procs:
        with open(effects_dir / f"scale-{proc.pid}") as handle:
            for line in handle:
                run_id, index = line.split()
                executions[run_id, int(index)].append(proc.pid)
    assert set(executions) == {(run_id, index) for run_id, *_ in runs for index in range(STEPS)}
    victims_last = {}
    for (run_id, index), pids in executions.items():
        if victim.pid in pids:
            victims_last[run_id] = max(index, victims_last.get(run_id, index))
    repeated = {key: pids for key, pids in executions.items() if len(pids) > 1}
    for (run_id, index), pids in repeated.items():
        assert len(pids) == 2 and pids.count(victim.pid) == 1, (run_id, index, pids)
        assert victims_last[run_id] == index, (run_id, index, "a step the killed worker had gone past ran again")
        assert run_id in recovered
    assert len(repeated) <= CONCURRENCY
    for proc in procs:
        if proc is not victim:
            assert proc.poll() is None
            assert "Traceback" not in workers.output(proc)


def worker_url(host: Host, server: TcpServer) -> str:
    return host.database_url(port=server.port, socket_dir=server.socket_dir, user=USER, database=DATABASE)


def manage(env: dict, *args: str) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "django", *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    return result.stdout
