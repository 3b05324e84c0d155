"""The type check starts no PostgreSQL: mypy's Django plugin imports the settings pyproject.toml names, and
mypy exits through ``os._exit``, so a server started at that import would be left running with its data."""

import os
import signal
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

from tests.helpers import ROOT


def processes_under(directory: str) -> list[int]:
    """Process ids whose command line names the directory (a server started on data kept there)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if directory.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def test_importing_the_type_checkers_settings_and_leaving_like_mypy_leaves_no_server():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as pyproject:
        settings_module = tomllib.load(pyproject)["tool"]["django-stubs"]["django_settings_module"]
    directory = tempfile.mkdtemp(prefix="durable-typecheck-")
    env = {key: value for key, value in os.environ.items() if key not in ("DATABASE_URL", "DJANGO_SETTINGS_MODULE")}
    env.update({"TMPDIR": directory, "PYTHONPATH": ROOT})
    try:
        subprocess.run(
            [sys.executable, "-c", f"import importlib, os; importlib.import_module({settings_module!r}); os._exit(0)"],
            cwd=ROOT, env=env, check=True, timeout=120,
        )
        assert processes_under(directory) == []
        assert [name for name in os.listdir(directory) if name.startswith("durable-pg-")] == []
    finally:
        for pid in processes_under(directory):
            os.kill(pid, signal.SIGKILL)
        subprocess.run(["rm", "-rf", directory], check=False)
