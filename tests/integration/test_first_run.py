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


def copy_example_project(destination):
    """The example project as a fresh clone has it: without the data the demo's embedded server keeps in
    example_project/.pgdata, which belongs to the user PostgreSQL runs as and cannot be copied or reused."""
    shutil.copytree(
        os.path.join(ROOT, "example_project"), destination, ignore=shutil.ignore_patterns(".pgdata", "__pycache__")
    )


def test_the_example_project_is_copied_without_the_demos_server_data(tmp_path, monkeypatch):
    # The README's demo command, run first, leaves example_project/.pgdata: a server's data, owned by the
    # user PostgreSQL runs as, on which a copy's server cannot start.
    source = tmp_path / "clone"
    (source / "example_project" / ".pgdata").mkdir(parents=True)
    (source / "example_project" / ".pgdata" / "PG_VERSION").write_text("16")
    (source / "example_project" / "manage.py").write_text("")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", str(source))
    copy_example_project(str(tmp_path / "copy"))
    assert (tmp_path / "copy" / "manage.py").exists()
    assert not (tmp_path / "copy" / ".pgdata").exists()


def run(command, *, cwd, env):
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout + result.stderr


def test_the_example_project_the_tests_and_the_benchmarks_start_quietly(fresh_machine):
    directory, env = fresh_machine
    copy_example_project(os.path.join(directory, "example_project"))
    outputs = {
        "example migrate": run([sys.executable, "example_project/manage.py", "migrate"], cwd=directory, env=env),
        "example check": run([sys.executable, "example_project/manage.py", "check"], cwd=directory, env=env),
        "tests": run([sys.executable, "-m", "django", "check", "--settings", "tests.settings"], cwd=ROOT, env=env),
        "benchmarks": run([sys.executable, "-m", "django", "check", "--settings", "bench.settings"], cwd=ROOT, env=env),
    }
    assert "Applying durable_django.0001_squashed_0022_drop_divergence_like_index... OK" in outputs["example migrate"]
    for command, output in outputs.items():
        assert "System check identified no issues" in output or command == "example migrate", (command, output)
        assert warning_lines(output) == [], (command, output)


def test_manage_py_check_on_startprojects_sqlite_says_postgresql_is_needed(tmp_path):
    # startproject's default database, with durable_django installed, as a newcomer's first `manage.py check`.
    # Django 6 runs checks tagged "database" only with --database: E001 must not be one of them.
    sqlite = {"ENGINE": "django.db.backends.sqlite3", "NAME": str(tmp_path / "db.sqlite3")}
    (tmp_path / "sqlite_settings.py").write_text(
        "SECRET_KEY = 'x'\nUSE_TZ = True\nDEFAULT_AUTO_FIELD = 'django.db.models.BigAutoField'\n"
        "INSTALLED_APPS = ['django.contrib.admin', 'django.contrib.auth', 'django.contrib.contenttypes',\n"
        "    'django.contrib.sessions', 'django.contrib.messages', 'durable_django']\n"
        f"DATABASES = {{'default': {sqlite!r}}}\n"
    )
    env = {key: value for key, value in os.environ.items() if key != "DJANGO_SETTINGS_MODULE"}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), ROOT])
    result = subprocess.run(
        [sys.executable, "-m", "django", "check", "--settings", "sqlite_settings"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )
    assert result.returncode != 0, result.stdout + result.stderr
    assert "durable_django.E001" in result.stderr
    assert "durable-django needs PostgreSQL" in result.stderr
