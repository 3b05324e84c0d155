import contextlib
import os
import re
import signal
import subprocess
import sys

import pytest

from tests.helpers import ROOT, sql, subprocess_database_url, wait_until
from tests.pgbouncer import PgBouncer, routed


@pytest.fixture(scope="session", autouse=True)
def flush_what_was_written():
    """Transactional tests end by truncating the tables that hold rows, not every table (tests/flush.py)."""
    from tests.flush import truncating_what_was_written

    with truncating_what_was_written():
        yield


@pytest.fixture(scope="session")
def stream_sessions(django_db_setup):
    """The readers' LISTEN and read sessions, closed before the test databases are dropped."""
    yield
    from durable_django.api import wakeups

    wakeups.close()


@pytest.fixture(autouse=True)
def close_stream_sessions_at_the_end(request):
    if request.node.get_closest_marker("django_db"):
        request.getfixturevalue("stream_sessions")


@pytest.fixture(scope="session")
def pgbouncer():
    """A real PgBouncer in transaction pooling mode in front of the test server, one per test process."""
    from django.db import connections

    bouncer = PgBouncer.start(connections["direct"].settings_dict)
    yield bouncer
    bouncer.stop()


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup, request):
    """With DURABLE_TEST_PGBOUNCER=1 (tox -e pgbouncer), "default" goes through PgBouncer once the test databases
    exist (they are created and dropped directly: PgBouncer would keep sessions open on them)."""
    from django.conf import settings

    if not settings.BEHIND_PGBOUNCER:
        yield
        return
    with routed(request.getfixturevalue("pgbouncer"), "default"):
        yield


@pytest.fixture(scope="session")
def pooled_alias(django_db_setup, pgbouncer):
    """The "pooled" alias, routed through PgBouncer: point DURABLE["DATABASE"] at it to work through the pooler."""
    with routed(pgbouncer, "pooled"):
        yield "pooled"


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    """Long tests first (a stable sort: the same order on every xdist worker), so that a parallel run ends on
    short ones; and refuse a parallel run whose xdist groups do not hold: each member would rebuild its group's
    module fixture."""
    items.sort(key=lambda item: item.get_closest_marker("long") is None)
    if not getattr(config.option, "loadgroup", False):  # set on an xdist worker under --dist loadgroup
        return
    ungrouped = [item.nodeid for item in items if item.get_closest_marker("xdist_group") and "@" not in item.nodeid]
    if ungrouped:
        raise pytest.UsageError(f"pytest-xdist did not group {ungrouped[0]}: use a pytest release it supports")


def pytest_addoption(parser):
    parser.addoption(
        "--soak",
        action="store_true",
        default=False,
        help="run the long chaos soak (tests/chaos): 600s of faults unless DURABLE_CHAOS_SECONDS says",
    )


@pytest.fixture(autouse=True)
def effects_dir(tmp_path, monkeypatch):
    """Every test gets a fresh directory for workflow side effects (tests.workflows.effects)."""
    directory = tmp_path / "effects"
    directory.mkdir()
    monkeypatch.setenv("DURABLE_TEST_EFFECTS_DIR", str(directory))
    return directory


@pytest.fixture(autouse=True)
def no_stranded_runs(request):
    """After every test that commits, no run may be in a state that must not exist (the reconciler's view).

    A test that builds such states on purpose says so with ``@pytest.mark.strands``.
    """
    marker = request.node.get_closest_marker("django_db")
    if marker is None or not marker.kwargs.get("transaction") or request.node.get_closest_marker("strands"):
        yield
        return
    request.getfixturevalue("transactional_db")
    yield
    from durable_django.engine.reconciler import Reconciler

    assert Reconciler().stranded() == []


class WorkerProcesses:
    """Real `manage.py durable_worker` subprocesses, killed at teardown whatever happened."""

    def __init__(self, effects_dir, tmp_path):
        self.effects_dir = effects_dir
        self.tmp_path = tmp_path
        self.procs: list[subprocess.Popen] = []

    def env(self, **overrides) -> dict:
        env = dict(os.environ)
        env.update(
            {
                "DATABASE_URL": subprocess_database_url(),
                "DURABLE_TEST_DIRECT_URL": subprocess_database_url("direct"),
                "DJANGO_SETTINGS_MODULE": "tests.settings",
                "DURABLE_TEST_EFFECTS_DIR": str(self.effects_dir),
                "DURABLE_TEST_LOG_LEVEL": "INFO",
                "PYTHONFAULTHANDLER": "1",
                "PYTHONPATH": ROOT,
            }
        )
        if "DATABASE_URL" in overrides:  # another server: its direct way in is its own URL
            env["DURABLE_TEST_DIRECT_URL"] = str(overrides["DATABASE_URL"])
        env.update({key: str(value) for key, value in overrides.items()})
        return env

    def start(self, *args, env=None, prefix=(), **env_overrides) -> subprocess.Popen:
        """A worker with these arguments; ``prefix`` runs it through a command of its own (tests/hosts.py)."""
        log_path = self.tmp_path / f"worker-{len(self.procs)}.log"
        with open(log_path, "w") as log:
            proc = subprocess.Popen(
                [*prefix, sys.executable, "-m", "django", "durable_worker", *args],
                env=env or self.env(**env_overrides),
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=ROOT,
            )
        proc.log_path = log_path
        self.procs.append(proc)
        return proc

    def wait_started(self, *procs) -> None:
        """Until each worker has logged its start (it is about to claim)."""
        for proc in procs:
            wait_until(lambda proc=proc: " starting: " in self.output(proc), message=f"worker {proc.pid} to start")

    def wait_idle(self, proc) -> None:
        """Until the worker has nothing to do and listens: its LISTEN session has subscribed (the listener then
        wakes the claim loop for one pass, which finds nothing and sleeps) and none of its sessions runs a
        statement. Its sessions are the ones ``pg_stat_activity`` names ``durable_worker <worker id>``."""
        self.wait_started(proc)
        worker_id = re.search(r"worker (\S+) starting: ", self.output(proc)).group(1)

        def idle():
            # Not this query's own session: behind PgBouncer it may be a server connection the worker used
            # last, still carrying its application name.
            sessions = sql(
                "SELECT state, query FROM pg_stat_activity WHERE application_name = %s AND pid <> pg_backend_pid()",
                [f"durable_worker {worker_id}"],
            )
            listening = any(state == "idle" and query.startswith("LISTEN ") for state, query in sessions)
            return listening and all(state == "idle" for state, _ in sessions)

        wait_until(idle, message=f"worker {proc.pid} to listen with nothing to do")

    def output(self, proc) -> str:
        with open(proc.log_path) as handle:
            return handle.read()

    def report(self):
        """For a failed test: each live worker's threads (PYTHONFAULTHANDLER dumps them on SIGABRT), then every log."""
        for proc in self.procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGCONT)
                    os.kill(proc.pid, signal.SIGABRT)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=10)
        for proc in self.procs:
            print(f"--- worker {proc.pid} (exit {proc.returncode}): {proc.log_path}\n{self.output(proc)}")

    def stop_all(self):
        for proc in self.procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGCONT)
                proc.kill()
            proc.wait(timeout=30)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    """Note on the test item whether its call failed, for fixtures that report more on a failure."""
    report = yield
    if report.when == "call":
        item.call_failed = report.failed
    return report


@pytest.fixture
def workers(effects_dir, tmp_path, request):
    processes = WorkerProcesses(effects_dir, tmp_path)
    yield processes
    if getattr(request.node, "call_failed", False):
        processes.report()
    processes.stop_all()


@pytest.fixture
def spans():
    """This process's OpenTelemetry spans, captured in memory by the SDK for the length of the test."""
    from tests import spans as captured

    exporter = captured.capture()
    yield exporter
    captured.release()
