""".ci/postgres, which gives a suite on an interpreter without pgserver wheels (CPython 3.13) a real server:
the command it runs gets a DATABASE_URL that connects, its exit status is the script's, and the server and
its data are gone afterwards, whatever the command did."""

import os
import shutil
import subprocess
import sys
import tempfile

import pytest

from tests.helpers import ROOT

pytestmark = pytest.mark.process

SCRIPT = os.path.join(ROOT, ".ci", "postgres")

# Run by the command .ci/postgres starts: where the server is, what it answers, then the exit status asked for.
PROBE = """
import os, sys, urllib.parse, psycopg
url = os.environ["DATABASE_URL"]
print(urllib.parse.parse_qs(urllib.parse.urlsplit(url).query)["host"][0])
with psycopg.connect(url) as conn:
    print(conn.execute("SELECT current_setting('server_version_num')::int / 10000").fetchone()[0])
sys.exit(int(sys.argv[1]))
"""


@pytest.fixture
def environment():
    """This interpreter as the one that starts the server (it has pgserver), and a TMPDIR of the test's own."""
    pytest.importorskip("pgserver", reason="this interpreter starts the server, and pgserver is not installed")
    directory = tempfile.mkdtemp(prefix="durable-ci-postgres-")
    env = {key: value for key, value in os.environ.items() if key != "DATABASE_URL"}
    env.update({"PGSERVER_PYTHON": sys.executable, "TMPDIR": directory})
    try:
        yield directory, env
    finally:
        shutil.rmtree(directory, ignore_errors=True)


@pytest.mark.parametrize("status", [0, 3])
def test_the_command_reaches_a_fresh_server_whose_data_is_deleted_after_it_whatever_it_exits_with(
    environment, status
):
    directory, env = environment
    result = subprocess.run(
        ["bash", SCRIPT, sys.executable, "-c", PROBE, str(status)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == status, result.stderr
    socket_dir, major = result.stdout.split()
    assert int(major) >= 16
    assert socket_dir.startswith(directory)
    assert not os.path.exists(socket_dir)
    # Only pgserver's lock directory (platformdirs' runtime-<uid> fallback) is left.
    assert [name for name in os.listdir(directory) if name.startswith("durable-pg-")] == []


def test_without_a_command_it_prints_the_url_of_a_server_left_running_and_stops_it_when_asked(environment):
    directory, env = environment
    started = subprocess.run(["bash", SCRIPT], env=env, capture_output=True, text=True, timeout=300)
    assert started.returncode == 0, started.stderr
    name, _, url = started.stdout.strip().partition("=")
    assert name == "DATABASE_URL"
    data_dir = started.stderr.strip().rpartition("--stop ")[2]
    assert data_dir.startswith(directory)
    try:
        probe = subprocess.run(
            [sys.executable, "-c", PROBE, "0"], env={**env, "DATABASE_URL": url}, capture_output=True, text=True
        )
        assert probe.returncode == 0, probe.stderr
    finally:
        stopped = subprocess.run(["bash", SCRIPT, "--stop", data_dir], env=env, capture_output=True, text=True)
    assert stopped.returncode == 0, stopped.stderr
    assert not os.path.exists(data_dir)
