"""Every record the worker logs about a run carries run_id, function, attempt (and outcome where known) as fields.

A real worker loop runs in this process (``--burst``), with a real handler on
the ``durable_django`` logger; a JSON formatter configured as docs/operations.md
shows emits those fields.
"""

import io
import json
import logging
import logging.config
import re
import threading
from pathlib import Path

import pytest

from durable_django import api
from durable_django.testing import claim, make_due
from durable_django.worker import Worker, WorkerOptions
from tests.helpers import ROOT, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

RUN_ID = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b")


class Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record):
        self.records.append(record)


@pytest.fixture
def records():
    handler = Records()
    logger = logging.getLogger("durable_django")
    previous = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    yield handler.records
    logger.removeHandler(handler)
    logger.setLevel(previous)


def burst():
    """A worker loop until nothing is claimable, then until its slot threads have closed their connections."""
    Worker(WorkerOptions(concurrency=2, burst=True, scheduler=False)).run()
    wait_until(
        lambda: not [thread for thread in threading.enumerate() if thread.name.startswith("durable-slot-")],
        message="the slot threads to exit",
    )


def test_every_worker_record_about_a_run_carries_its_fields(records):
    succeeded = api.enqueue("tests.two_steps", {"second_sleep": 0})
    failing = api.enqueue("tests.always_fails", {})
    sleeper = api.enqueue("tests.sleeper", {"seconds": 3600})
    cancelled = api.enqueue("tests.slow", {"seconds": 60})
    claim(functions=["tests.slow"])
    api.cancel(cancelled.run_id)
    make_due(cancelled.run_id)  # its holder died: the next claim lands it cancelled
    burst()
    make_due(failing.run_id)
    burst()
    about_runs = [record for record in records if RUN_ID.search(record.getMessage())]
    assert len(about_runs) >= 10
    for record in about_runs:
        run_id = RUN_ID.search(record.getMessage()).group(0)
        assert (record.run_id, record.attempt >= 1) == (run_id, True), record.getMessage()
        assert record.function == api.get_run(run_id).name, record.getMessage()
    outcomes = {(record.run_id, record.attempt, getattr(record, "outcome", None)) for record in about_runs}
    assert {
        (succeeded.run_id, 1, "succeeded"),
        (failing.run_id, 1, "retrying"),
        (failing.run_id, 2, "retrying"),
        (sleeper.run_id, 1, "suspended"),
        (cancelled.run_id, 2, "cancelled"),
        (succeeded.run_id, 1, None),  # its claim: no outcome yet
    } <= outcomes


def operations_logging_config() -> dict:
    """The JSON logging configuration docs/operations.md shows."""
    text = (Path(ROOT) / "docs" / "operations.md").read_text()
    [block] = re.findall(r"<!-- tested: json logging -->\s*```python\n(.*?)```", text, re.S)
    namespace: dict = {}
    exec(compile(block, "docs/operations.md", "exec"), namespace)
    return namespace["LOGGING"]


def test_the_documented_json_logging_emits_the_fields(records):
    config = operations_logging_config()
    assert config["handlers"]["console"]["formatter"] == "json"
    # The formatter exactly as logging.config.dictConfig(LOGGING) builds it, without reconfiguring this process.
    formatter = logging.config.DictConfigurator(config).configure_formatter(dict(config["formatters"]["json"]))
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(formatter)
    logging.getLogger("durable_django").addHandler(handler)
    try:
        run = api.enqueue("tests.noop", {})
        burst()
    finally:
        logging.getLogger("durable_django").removeHandler(handler)
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    [landed] = [line for line in lines if line.get("outcome") == "succeeded"]
    assert landed["run_id"] == run.run_id and landed["function"] == "tests.noop" and landed["attempt"] == 1
    assert landed["levelname"] == "INFO" and landed["name"] == "durable_django.worker"
