"""The Markdown report of a benchmark run: the facts a reader needs to weigh its figures, then its table.

The ratios in the table depend on the machine and on what else ran on it, so the header states both:
the versions of everything measured (the package's side and each peer's, read in the peers' own
interpreter) and the 1-minute load average at the start, at the end and at its highest in between.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import logging
import os
import platform
import subprocess
import threading
from collections.abc import Callable, Iterable, Sequence

log = logging.getLogger(__name__)

# Run in another interpreter: the versions of the distributions named in argv, as that interpreter sees them.
VERSIONS_SCRIPT = """
import importlib.metadata, json, platform, sys
versions = {"Python": platform.python_version()}
for name in sys.argv[1:]:
    try:
        versions[name] = importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        versions[name] = "not installed"
print(json.dumps(versions))
"""


def local_versions() -> dict[str, str]:
    """Python, Django, psycopg and durable-django as this process imported them."""
    import django
    import psycopg

    import durable_django

    return {
        "Python": platform.python_version(),
        "Django": django.get_version(),
        "psycopg": psycopg.__version__,
        "durable-django": durable_django.__version__,
    }


def interpreter_versions(python: str, distributions: Iterable[str]) -> dict[str, str]:
    """Python's and each distribution's version in the interpreter ``python`` (the peers run in a venv of their own)."""
    result = subprocess.run(
        [python, "-c", VERSIONS_SCRIPT, *distributions], capture_output=True, text=True, check=True, timeout=60
    )
    return json.loads(result.stdout)


def server_version(conn) -> str:
    """The PostgreSQL server's version, as it reports it (``SHOW server_version``)."""
    return conn.execute("SHOW server_version").fetchone()[0]


def commit(root: str) -> str | None:
    """``git describe --always --dirty`` of the checkout at ``root``; None when ``root`` is not the top of one."""
    try:
        top = subprocess.run(
            ["git", "-C", root, "rev-parse", "--show-toplevel"], capture_output=True, text=True, check=True
        ).stdout.strip()
        if os.path.realpath(top) != os.path.realpath(root):
            return None
        return subprocess.run(
            ["git", "-C", root, "describe", "--always", "--dirty"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def one_minute_load() -> float:
    return os.getloadavg()[0]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Load:
    """The 1-minute load average over a run; None where no sample could be read."""

    start: float | None
    end: float | None
    highest: float | None
    samples: int
    interval: float


class LoadSampler:
    """Samples the 1-minute load average every ``interval`` seconds in a thread, from ``start()`` to ``stop()``.

    A sample that fails is logged and the next one taken: the thread never ends before ``stop()``, so the
    highest figure covers the whole run.
    """

    def __init__(self, interval: float = 5.0, read: Callable[[], float] = one_minute_load) -> None:
        self.interval = interval
        self.read = read
        self.highest: float | None = None
        self.samples = 0
        self.first: float | None = None
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._sample_until_stopped, name="load-sampler", daemon=True)

    def start(self) -> None:
        self.first = self._sample()
        self._thread.start()

    def stop(self) -> Load:
        self._stopping.set()
        self._thread.join()
        last = self._sample()
        return Load(start=self.first, end=last, highest=self.highest, samples=self.samples, interval=self.interval)

    def _sample_until_stopped(self) -> None:
        while not self._stopping.wait(self.interval):
            self._sample()

    def _sample(self) -> float | None:
        try:
            value = float(self.read())
        except Exception:  # one failed sample must not end the sampling: logged, and the next one taken
            log.exception("could not read the load average; sampling goes on")
            return None
        with self._lock:
            self.samples += 1
            self.highest = value if self.highest is None else max(self.highest, value)
        return value


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunFacts:
    """What the report's header states about a run."""

    started: datetime.datetime
    finished: datetime.datetime
    command: str
    selection: str | None  # the options that chose the benchmarks; None for the default set
    commit: str | None
    versions: dict[str, str]
    server: str
    peers: dict[str, str]  # the peers' interpreter and each measured peer's distributions; empty if none ran
    peers_interpreter: str
    cpus: int | None
    load: Load


def _figure(value: float | None) -> str:
    return "unavailable" if value is None else f"{value:.2f}"


def _versions(versions: dict[str, str]) -> str:
    return ", ".join(f"{name} {version}" for name, version in versions.items())


def _cell(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def header(facts: RunFacts) -> list[str]:
    """The header's lines, title first."""
    if facts.selection is None:
        title = "# The latest benchmark run"
        scope = "The default set of benchmarks."
    else:
        title = f"# A partial benchmark run (`{facts.selection}`)"
        scope = f"Partial: only what `{facts.selection}` chose ran, not the default set of benchmarks."
    minutes = (facts.finished - facts.started).total_seconds() / 60
    load = facts.load
    lines = [
        title,
        "",
        f"Written by `bench/run_all.py` at the end of the run (bench/README.md); not edited by hand. {scope}",
        "",
        f"- Date: {facts.started:%Y-%m-%d %H:%M} UTC, {minutes:.1f} minutes",
        f"- Command: `{facts.command}`",
    ]
    if facts.commit is not None:
        lines.append(f"- Commit: `{facts.commit}`")
    lines += [f"- {_versions(facts.versions)}", f"- PostgreSQL {facts.server}"]
    if facts.peers:
        where = f"in their own interpreter (`{facts.peers_interpreter}`)"
        lines.append(f"- Peers measured, {where}: {_versions(facts.peers)}")
    else:
        lines.append("- Peers measured: none")
    lines += [
        f"- CPUs: {facts.cpus if facts.cpus is not None else 'unknown'}",
        f"- Load average (1 minute): {_figure(load.start)} at the start, {_figure(load.end)} at the end, "
        f"{_figure(load.highest)} at the highest ({load.samples} samples, every {load.interval:g} s)",
    ]
    return lines


def markdown(facts: RunFacts, rows: Sequence[tuple[str, str, str, str]]) -> str:
    """The whole report: the header, then the rows of the printed table (benchmark, measured, ratio, target)."""
    lines = [*header(facts), "", "| benchmark | measured | ratio | target |", "| --- | --- | --- | --- |"]
    lines += ["| " + " | ".join(_cell(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def write(path: str, text: str) -> None:
    """Write the report at ``path``, its directory made if missing."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as report:
        report.write(text)
