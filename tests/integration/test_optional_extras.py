"""The otel extra is optional: without it (or without an SDK) the package imports, runs and traces nothing.

Each check runs in a process of its own where the package is absent the way
Python marks a module absent (``sys.modules[name] = None`` makes importing it
raise ImportError), against this session's database. Without the prometheus
extra, ``--metrics-port`` says what is missing
(tests/process/test_observability_processes.py).
"""

import subprocess
import sys

import pytest

from tests.helpers import ROOT, subprocess_database_url

pytestmark = pytest.mark.django_db(transaction=True)

RUN_ONE = """
import django
django.setup()
from durable_django import api
from durable_django.engine import tracing
from durable_django.testing import run_until_idle
import durable_django.admin, durable_django.worker
run = api.enqueue("tests.progress", {"steps": 2})
run_until_idle(functions=["tests.progress"])
done = api.get_run(run.run_id)
print(tracing.INSTALLED, tracing.configured(), done.status, done.output, done.progress, done.trace_context)
"""


@pytest.mark.parametrize(
    "absent, expected",
    [
        # Without the otel extra: nothing is imported, nothing is traced.
        ("opentelemetry", "False False"),
        # The API installed (perhaps by another library) but no SDK configured: no span is even made.
        ("opentelemetry.sdk", "True False"),
    ],
)
def test_without_opentelemetry_or_its_sdk_runs_execute_untraced(absent, expected):
    result = subprocess.run(
        [sys.executable, "-c", f"import sys; sys.modules[{absent!r}] = None\n" + RUN_ONE],
        env={"DATABASE_URL": subprocess_database_url(), "DJANGO_SETTINGS_MODULE": "tests.settings", "PYTHONPATH": ROOT},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[0] == f"{expected} succeeded done {{'done': 2, 'total': 2}} None"
