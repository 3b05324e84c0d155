"""Every durable command's arguments, fuzzed as argv bytes: a one-line refusal writing nothing, or the value stored.

Python decodes argv with ``surrogateescape``, so an undecodable byte reaches a
command as a lone surrogate; ``os.fsdecode`` makes the same string from the
same bytes here. The commands run in-process with ``call_command`` (a refused
argument is a ``CommandError``, which ``manage.py`` prints as one line and exit
status 1 or 2), the worker's arguments through its parser alone (it would
otherwise start), and the reproduced cases as real ``manage.py`` processes too.
"""

import json
import os
import subprocess
import sys

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from hypothesis import example, given
from hypothesis import strategies as st

from durable_django import api
from durable_django.management.arguments import MAX_CONCURRENCY
from durable_django.management.commands.durable_worker import Command as WorkerCommand
from tests.helpers import ROOT, sql, subprocess_database_url
from tests.strategies import fuzz, integers, json_trees

pytestmark = pytest.mark.django_db(transaction=True)

# Bytes an argument may hold: text, UTF-8 of any character, bytes that are no UTF-8, NUL excluded (argv
# cannot carry it: the C strings end there).
argv_bytes = st.one_of(
    st.text(min_size=1, max_size=20).map(lambda text: text.encode("utf-8", "surrogatepass")),
    st.binary(min_size=1, max_size=12),
    st.sampled_from([b"tests.noop", b"tests.\xff", b"\xed\xa0\x80", b"k" * 513, b"2147483648", b"nan", b"-1"]),
).filter(lambda raw: b"\x00" not in raw and not raw.startswith(b"-"))
json_argv = st.one_of(
    json_trees.map(lambda value: json.dumps(value, allow_nan=True).encode("utf-8", "surrogatepass")),
    st.sampled_from([b"1" * 5_000, b"[" * 100_000, b'"\\ud800"', b'"\xff"', b"NaN", b'{"a": 1}']),
    argv_bytes,
).filter(lambda raw: b"\x00" not in raw and not raw.startswith(b"-"))
number_argv = st.one_of(integers.map(lambda n: str(n).encode()), st.sampled_from([b"nan", b"inf", b"1e999", b"x"]))


def argv(raw: bytes) -> str:
    """The str Python's argv holds for these bytes."""
    return os.fsdecode(raw)


def one_line_refusal(call) -> str | None:
    """Run ``call``; None on success, else the CommandError's message, which must be one line."""
    try:
        call()
    except CommandError as exc:
        message = str(exc)
        assert "\n" not in message and "Traceback" not in message, message
        return message
    return None


def counts() -> tuple:
    return sql("SELECT (SELECT count(*) FROM durable_run), (SELECT count(*) FROM durable_signal)")[0]


@fuzz(20)
@given(name=argv_bytes, value=json_argv, queue=argv_bytes, key=argv_bytes, priority=number_argv)
@example(name=b"tests.noop", value=b'"\\ud800"', queue=b"default", key=b"k", priority=b"0")
@example(name=b"tests.noop", value=b"[" * 100_000, queue=b"default", key=b"k", priority=b"0")
@example(name=b"tests.noop", value=b"1", queue=b"q\xff", key=b"k", priority=b"0")
@example(name=b"tests.noop", value=b"1", queue=b"default", key=b"k" * 513, priority=b"2147483648")
def test_durable_enqueue(transactional_db, name, value, queue, key, priority):
    before = counts()
    arguments = [argv(name), argv(value), f"--queue={argv(queue)}", f"--idempotency-key={argv(key)}"]
    refused = one_line_refusal(lambda: call_command("durable_enqueue", *arguments, f"--priority={argv(priority)}"))
    if refused is not None:
        assert counts() == before, refused
        return
    [(run_id,)] = sql("SELECT run_id FROM durable_run WHERE idempotency_key = %s", [f":{argv(key)}"])
    run = api.get_run(run_id)
    assert (run.name, run.input, run.queue, run.priority) == (
        argv(name),
        json.loads(argv(value)),
        argv(queue),
        int(argv(priority)),
    )
    sql("DELETE FROM durable_run")


@pytest.fixture
def waiting_run(transactional_db):
    return api.enqueue("tests.noop", {"for": "signals"}).run_id


def test_durable_signal(waiting_run):
    @fuzz(20)
    @given(run_id=st.just(waiting_run.encode()) | argv_bytes, signal=argv_bytes, value=json_argv, number=number_argv)
    @example(run_id=waiting_run.encode(), signal=b"go", value=b"1", number=b"2147483648")
    @example(run_id=b"run-\xff", signal=b"go", value=b"1", number=b"0")
    @example(run_id=waiting_run.encode(), signal=b"go\xed\xa0\x80", value=b"1", number=b"0")
    @example(run_id=waiting_run.encode(), signal=b"go", value=b'{"a": "\\udfff"}', number=b"0")
    def check(run_id, signal, value, number):
        before = counts()
        arguments = [argv(run_id), argv(signal), argv(value), f"--occurrence={argv(number)}"]
        refused = one_line_refusal(lambda: call_command("durable_signal", *arguments))
        if refused is not None:
            assert counts() == before, refused
            return
        [(stored,)] = sql("SELECT value FROM durable_signal WHERE signal = %s", [argv(signal)])
        assert (json.loads(stored) if isinstance(stored, str) else stored) == json.loads(argv(value))
        sql("DELETE FROM durable_signal")

    check()


@fuzz(20)
@given(run_id=argv_bytes, name=argv_bytes, limit=number_argv, seconds=number_argv, command=st.integers(0, 3))
@example(run_id=b"run-\xff", name=b"x", limit=b"1", seconds=b"1", command=0)
@example(run_id=b"r", name=b"x", limit=b"1", seconds=b"nan", command=3)
def test_the_reading_commands(transactional_db, run_id, name, limit, seconds, command):
    """cancel, resume, runs and health: a refusal or an answer, never a traceback, and nothing written."""
    before = counts()
    calls = [
        lambda: call_command("durable_cancel", argv(run_id)),
        lambda: call_command("durable_resume", argv(run_id)),
        lambda: call_command("durable_runs", f"--name={argv(name)}", f"--limit={argv(limit)}"),
        lambda: call_command("durable_health", f"--max-oldest-pending={argv(seconds)}"),
    ]
    try:
        one_line_refusal(calls[command])
    except SystemExit as exc:  # durable_health's verdict on a healthy or unhealthy system, not a refusal
        assert command == 3 and exc.code == 1
    assert counts() == before


def worker_options(*arguments: str) -> dict | str:
    """The worker's options as its parser reads them, or its one-line refusal (the worker is not started)."""
    parser = WorkerCommand().create_parser("manage.py", "durable_worker")
    try:
        return vars(parser.parse_args(list(arguments)))
    except CommandError as exc:
        assert "\n" not in str(exc)
        return str(exc)


@fuzz(30)
@given(concurrency=number_argv, grace=number_argv, names=argv_bytes, abandoned=number_argv)
@example(concurrency=b"30000", grace=b"1", names=b"tests.noop", abandoned=b"1")
@example(concurrency=b"4", grace=b"nan", names=b"tests.noop", abandoned=b"1")
@example(concurrency=b"4", grace=b"1", names=b"q\xff", abandoned=b"1")
def test_durable_worker_arguments(concurrency, grace, names, abandoned):
    options = worker_options(
        f"--concurrency={argv(concurrency)}",
        f"--grace={argv(grace)}",
        f"--queues={argv(names)}",
        f"--functions={argv(names)}",
        f"--max-abandoned={argv(abandoned)}",
    )
    if isinstance(options, str):
        return
    assert 1 <= options["concurrency"] <= MAX_CONCURRENCY
    assert 0 <= options["grace"] < float("inf")
    for listed in (options["queues"], options["functions"]):
        assert all(name.encode("utf-8") and "\x00" not in name for name in listed)


# A few of the cases reproduced, each as a real manage.py process given raw argv bytes (the fuzz above tries
# them all in-process).
REPRODUCED = {
    "a surrogate in JSON": [b"durable_enqueue", b"tests.noop", b'"\\ud800"'],
    "a non-UTF-8 byte in a run id": [b"durable_cancel", b"run-\xff"],
    "a NaN age": [b"durable_health", b"--max-oldest-pending", b"nan"],
    "a NaN grace": [b"durable_worker", b"--burst", b"--grace", b"nan"],
    "30,000 threads": [b"durable_worker", b"--burst", b"--concurrency", b"30000"],
}


def test_the_reproduced_arguments_are_one_line_refusals_from_real_processes(transactional_db):
    env = {
        **os.environ,
        "DATABASE_URL": subprocess_database_url(),
        "DURABLE_TEST_DIRECT_URL": subprocess_database_url("direct"),
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "PYTHONPATH": ROOT,
    }
    processes = {
        label: subprocess.Popen(
            [sys.executable.encode(), b"-m", b"django", *arguments],
            env=env,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for label, arguments in REPRODUCED.items()
    }
    outcomes = {}
    for label, process in processes.items():
        _, stderr = process.communicate(timeout=120)
        errors = stderr.decode(errors="replace").strip().splitlines()
        outcomes[label] = (process.returncode != 0, "Traceback" in stderr.decode(errors="replace"), errors[-1:])
    verdicts = {label: (failed, traceback) for label, (failed, traceback, _) in outcomes.items()}
    assert verdicts == dict.fromkeys(REPRODUCED, (True, False)), outcomes
    assert all(last and "error" in last[0].lower() for _, _, last in outcomes.values()), outcomes
    assert counts() == (0, 0)
