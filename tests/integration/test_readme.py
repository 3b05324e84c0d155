"""The README's quick start runs: every code block marked `<!-- tested: quick start -->`."""

import re
import threading
from pathlib import Path

import pytest
from django.db import connections

from durable_django.registry import registry
from durable_django.store.db import WAKE_CHANNEL
from durable_django.store.sessions import listening
from durable_django.testing import run_until_idle
from tests.helpers import ROOT

pytestmark = pytest.mark.django_db(transaction=True)

MARKED_BLOCK = re.compile(r"<!-- tested: quick start -->\s*```python\n(.*?)```", re.S)


def quick_start_blocks():
    return MARKED_BLOCK.findall((Path(ROOT) / "README.md").read_text())


def test_the_readme_marks_its_quick_start_blocks():
    assert len(quick_start_blocks()) == 3


def test_the_quick_start_registers_submits_waits_and_tests():
    define, submit, user_test = quick_start_blocks()
    try:
        exec(compile(define, "README: myapp/durable.py", "exec"), {})
        stop = threading.Event()

        def worker():
            # As a worker does: run what is due, then wait for the NOTIFY of the next enqueue (LISTEN first, so
            # none is missed), looking again at least every second for the stop.
            with listening([WAKE_CHANNEL]) as session:
                while not stop.is_set():
                    run_until_idle()
                    for _ in session.notifies(timeout=1.0, stop_after=1):
                        pass
            connections.close_all()

        thread = threading.Thread(target=worker)
        thread.start()
        try:
            exec(compile(submit, "README: submit", "exec"), {})
        finally:
            stop.set()
            thread.join()
        namespace = {}
        exec(compile(user_test, "README: test", "exec"), namespace)
        namespace["test_greeting"]()
    finally:
        registry.unregister("greetings.send")
