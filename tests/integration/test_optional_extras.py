"""The otel and prometheus extras are optional: without them the package imports and works, and says what is missing.

Each check runs in a process of its own where the package is absent the way
Python marks a module absent (``sys.modules[name] = None`` makes importing it
raise ImportError), against this session's database.
"""

import subprocess
import sys

import pytest

from tests.helpers import ROOT, subprocess_database_url

pytestmark = pytest.mark.django_db(transaction=True)

WITHOUT_OPENTELEMETRY = """
import sys
sys.modules["opentelemetry"] = None
import django
django.setup()
from durable_django import api
from durable_django.engine import tracing
from durable_django.testing import run_until_idle
import durable_django.admin, durable_django.worker
run = api.enqueue("tests.progress", {"steps": 2})
run_until_idle(functions=["tests.progress"])
done = api.get_run(run.run_id)
print(tracing.INSTALLED, done.status, done.output, done.progress, done.trace_context)
"""


def test_without_opentelemetry_runs_execute_untraced():
    result = subprocess.run(
        [sys.executable, "-c", WITHOUT_OPENTELEMETRY],
        env={"DATABASE_URL": subprocess_database_url(), "DJANGO_SETTINGS_MODULE": "tests.settings", "PYTHONPATH": ROOT},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[0] == "False succeeded done {'done': 2, 'total': 2} None"
