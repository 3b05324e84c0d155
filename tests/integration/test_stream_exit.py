"""A process that read a stream closes its LISTEN session at exit, before what it registered earlier.

An embedded PostgreSQL stops at exit too (the demo's): were the readers' session still open then, the
script would end logging that session's failures, one traceback after another.
"""

import os
import subprocess
import sys

import pytest

from tests.helpers import ROOT

pytestmark = pytest.mark.django_db(transaction=True)

SCRIPT = """
import atexit, django
django.setup()
from durable_django.api import wakeups

def after_the_hub():  # registered first, so it runs after every exit hook registered later
    thread = wakeups.hub._thread
    print("listening at exit" if thread is not None and thread.is_alive() else "closed at exit")

atexit.register(after_the_hub)
wakeups.hub.subscribe("00000000-0000-0000-0000-000000000000", wakeups.ThreadWaiter())
assert wakeups.hub.wait_listening()
print("listening")
"""


def test_a_script_that_listened_for_a_stream_has_closed_its_session_by_the_exit_hooks_it_registered_before():
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": ROOT, "DJANGO_SETTINGS_MODULE": "tests.settings"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["listening", "closed", "at", "exit"], (result.stdout, result.stderr)
