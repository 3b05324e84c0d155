"""A newcomer's first commands, with no DATABASE_URL and no XDG_RUNTIME_DIR (a container, CI, ``su``), print no
warning: the embedded PostgreSQL they start is given a runtime directory instead of complaining about it."""

import os
import shutil
import subprocess
import sys
import tempfile

import pytest

from tests.helpers import ROOT, warning_lines

pytestmark = pytest.mark.process


@pytest.fixture
def fresh_machine():
    """A temporary directory as TMPDIR (where the embedded servers and their runtime directory go) and the
    environment of a shell that has never started one. Not under pytest's tmp_path: pgserver, run as root,
    opens the directories above its data to the user PostgreSQL runs as."""
    directory = tempfile.mkdtemp(prefix="durable-first-run-")
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("DATABASE_URL", "XDG_RUNTIME_DIR", "DJANGO_SETTINGS_MODULE")
        and not key.startswith(("DURABLE_", "SHOP_"))
    }
    env.update({"TMPDIR": directory, "PYTHONPATH": ROOT})
    try:
        yield directory, env
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def run(command, *, cwd, env):
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout + result.stderr


def test_the_example_project_the_tests_and_the_benchmarks_start_quietly(fresh_machine):
    directory, env = fresh_machine
    # The example project, copied so that its embedded server's data (example_project/.pgdata) is fresh.
    shutil.copytree(os.path.join(ROOT, "example_project"), os.path.join(directory, "example_project"))
    outputs = {
        "example migrate": run([sys.executable, "example_project/manage.py", "migrate"], cwd=directory, env=env),
        "example check": run([sys.executable, "example_project/manage.py", "check"], cwd=directory, env=env),
        "tests": run([sys.executable, "-m", "django", "check", "--settings", "tests.settings"], cwd=ROOT, env=env),
        "benchmarks": run([sys.executable, "-m", "django", "check", "--settings", "bench.settings"], cwd=ROOT, env=env),
    }
    assert "Applying durable_django.0001_initial... OK" in outputs["example migrate"]
    for command, output in outputs.items():
        assert "System check identified no issues" in output or command == "example migrate", (command, output)
        assert warning_lines(output) == [], (command, output)
