"""Observability of real durable_worker processes: spans across a SIGKILL, a scraped metrics port, the workers table."""

import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest
from opentelemetry import trace
from prometheus_client.parser import text_string_to_metric_families

from durable_django import api
from durable_django.engine.health import live_workers
from tests import spans as span_files
from tests.helpers import ROOT, sql, wait_until
from tests.workflows import effects

pytestmark = [pytest.mark.process, pytest.mark.django_db(transaction=True)]

# What a returning thread counts, it counts before it logs that it came back, and the pass of the claim loop
# it wakes on its way out counts within milliseconds: a second of nothing counted after that line is more
# than ten times what a late count would take to show.
QUIET_SECONDS = 1.0

SHORT_LEASE = {"DURABLE_TEST_LEASE_SECONDS": "2"}


def status(run_id):
    return api.get_run(run_id).status


def test_a_replay_after_sigkill_emits_no_span_for_the_replayed_step(workers, spans, tmp_path):
    """Each worker writes the spans it ends to a file of its own (tests/spans.py) as they end, so what the
    killed worker had finished before the SIGKILL is on disk, and the spans of the worker that finished the
    run can be told apart from it."""
    with trace.get_tracer("tests").start_as_current_span("request") as request:
        run = api.enqueue("tests.two_steps", {"second_sleep": 60})
    trace_id = f"{request.get_span_context().trace_id:032x}"
    request_span = f"{request.get_span_context().span_id:016x}"
    killed_file, finisher_file = tmp_path / "killed.jsonl", tmp_path / "finisher.jsonl"
    doomed = workers.start("--concurrency", "1", DURABLE_TEST_SPANS_FILE=killed_file, **SHORT_LEASE)
    wait_until(lambda: effects.exists("in-second"), message="the second step to start")
    doomed.send_signal(signal.SIGKILL)
    doomed.wait(timeout=10)
    sql("UPDATE durable_run SET input = '{\"second_sleep\": 0}' WHERE run_id = %s", [run.run_id])
    workers.start("--concurrency", "1", DURABLE_TEST_SPANS_FILE=finisher_file, **SHORT_LEASE)
    wait_until(lambda: status(run.run_id) == "succeeded", timeout=60, message="recovery")
    # A success's attempt span ends once its batch has landed, just after the run reads succeeded.
    wait_until(
        lambda: any(span["name"].startswith("durable.attempt") for span in span_files.read_file(finisher_file)),
        message="the finishing worker's attempt span",
    )

    # The killed worker had ended its first step's span; its attempt never ended.
    killed = span_files.read_file(killed_file)
    assert [(span["name"], span["trace_id"]) for span in killed] == [("durable.step first", trace_id)]
    finished = span_files.read_file(finisher_file)
    [attempt] = [span for span in finished if span["name"] == "durable.attempt tests.two_steps"]
    assert attempt["trace_id"] == trace_id and attempt["parent_id"] == request_span
    assert attempt["attributes"]["durable.attempt"] == 2 and attempt["attributes"]["durable.outcome"] == "succeeded"
    assert attempt["events"] == [{"name": "durable.step.replayed", "attributes": {"durable.step": "first"}}]
    steps = [span for span in finished if span["name"].startswith("durable.step ")]
    assert [(span["name"], span["parent_id"]) for span in steps] == [("durable.step second", attempt["span_id"])]
    assert effects.count("first") == 1


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def scrape(port: int) -> dict[tuple[str, tuple], float]:
    """Every sample on the worker's /metrics, by (name, sorted labels)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def moved(before, after, prefix="durable_") -> dict:
    """The samples of our counters and histogram counts that changed, by how much."""
    return {
        key: after[key] - before.get(key, 0.0)
        for key in after
        if key[0].startswith(prefix) and key[0].endswith(("_total", "_count")) and after[key] != before.get(key, 0.0)
    }


def test_metrics_count_exactly_the_runs_executed_and_the_port_closes_with_the_worker(workers):
    port = free_port()
    worker = workers.start("--concurrency", "2", "--metrics-port", str(port), DURABLE_TEST_POLL_SECONDS="1")
    before = wait_until(lambda: _try_scrape(port), message="the metrics port to serve")
    noops = [api.enqueue("tests.noop", {"n": n}) for n in range(5)]
    two_steps = [api.enqueue("tests.two_steps", {"second_sleep": 0}) for _ in range(2)]
    failing = api.enqueue("tests.always_fails", {})
    sleeper = api.enqueue("tests.sleeper", {"seconds": 3600})
    expected = {
        ("durable_attempts_total", (("function", "tests.noop"), ("outcome", "succeeded"))): 5,
        ("durable_attempts_total", (("function", "tests.two_steps"), ("outcome", "succeeded"))): 2,
        ("durable_attempts_total", (("function", "tests.always_fails"), ("outcome", "retrying"))): 2,
        ("durable_attempts_total", (("function", "tests.always_fails"), ("outcome", "failed"))): 1,
        ("durable_attempts_total", (("function", "tests.sleeper"), ("outcome", "suspended"))): 1,
        # Executed steps only: the sleeper's sleep is no step.
        ("durable_steps_total", (("function", "tests.two_steps"),)): 4,
        ("durable_steps_total", (("function", "tests.sleeper"),)): 1,
        ("durable_attempt_duration_seconds_count", (("function", "tests.noop"),)): 5,
        ("durable_attempt_duration_seconds_count", (("function", "tests.two_steps"),)): 2,
        ("durable_attempt_duration_seconds_count", (("function", "tests.always_fails"),)): 3,
        ("durable_attempt_duration_seconds_count", (("function", "tests.sleeper"),)): 1,
        # One claim per attempt.
        ("durable_queue_lag_seconds_count", (("queue", "default"),)): 11,
    }
    wait_until(
        lambda: moved(before, scrape(port)) == expected,
        timeout=60,
        message="the counters to move by the attempts made",
    )
    assert [status(run.run_id) for run in noops + two_steps] == ["succeeded"] * 7
    assert (status(failing.run_id), status(sleeper.run_id)) == ("failed", "waiting")
    after = scrape(port)
    assert (
        after[("durable_worker_slots", (("state", "busy"),))] + after[("durable_worker_slots", (("state", "idle"),))]
        == 2
    )
    # Read at most every POLL_SECONDS (1s here): the waiting sleeper shows up, counted exactly.
    wait_until(
        lambda: scrape(port).get(("durable_runs", (("queue", "default"), ("status", "waiting")))) == 1,
        message="the runs gauge",
    )
    assert moved(before, scrape(port)) == expected  # nothing more was counted meanwhile

    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=30) == 0
    with pytest.raises(OSError):
        scrape(port)


def _try_scrape(port):
    try:
        return scrape(port)
    except OSError:
        return None


def test_an_attempt_ended_at_its_timeout_is_reported_once_as_timed_out_even_while_its_thread_is_stuck(
    workers, tmp_path
):
    """The claim loop reports what it ended at a time limit: a stuck sync thread never returns to report it, and
    an async one that does (cancelled) reports nothing more."""
    port, spans_file = free_port(), tmp_path / "spans.jsonl"
    worker = workers.start(
        "--concurrency", "2", "--max-abandoned", "1", "--metrics-port", str(port), DURABLE_TEST_SPANS_FILE=spans_file
    )
    before = wait_until(lambda: _try_scrape(port), message="the metrics port to serve")
    stuck = api.enqueue("tests.stuck_once", {})  # time.sleep(3600) under a 1 s timeout: its thread never returns
    cancelled = api.enqueue("tests.async_stuck", {})  # cancelled at its timeout: its thread comes back
    wait_until(lambda: "came back and exits" in workers.output(worker), timeout=60, message="the async thread")
    timed_out = {
        ("durable_attempts_total", (("function", name), ("outcome", "timed_out"))): 1
        for name in ("tests.stuck_once", "tests.async_stuck")
    } | {
        ("durable_attempt_duration_seconds_count", (("function", name),)): 1
        for name in ("tests.stuck_once", "tests.async_stuck")
    }

    def counted():
        return {
            key: value
            for key, value in moved(before, scrape(port)).items()
            if not key[0].startswith("durable_queue_lag")
        }

    wait_until(lambda: counted() == timed_out, timeout=30, message="each timed-out attempt counted once")
    # A check that nothing happens: the cancelled thread came back, and nothing more may be counted, as lost or
    # otherwise, in a quiet period (QUIET_SECONDS) no event marks the end of.
    time.sleep(QUIET_SECONDS)
    assert counted() == timed_out
    attempts = [span for span in span_files.read_file(spans_file) if span["name"].startswith("durable.attempt ")]
    assert sorted((span["name"], span["attributes"]["durable.outcome"], span["status"]) for span in attempts) == [
        ("durable.attempt tests.async_stuck", "timed_out", "ERROR"),
        ("durable.attempt tests.stuck_once", "timed_out", "ERROR"),
    ]
    assert {status(stuck.run_id), status(cancelled.run_id)} == {"failed"}
    assert worker.poll() is None


def test_metrics_port_without_prometheus_client_is_a_clear_error(workers):
    """``sys.modules[name] = None`` is how Python marks a module absent: importing it raises ImportError."""
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; sys.modules['prometheus_client'] = None; "
            "from django.core.management import execute_from_command_line; "
            "execute_from_command_line(['manage.py', 'durable_worker', '--burst', '--metrics-port', '9'])",
        ],
        env=workers.env(),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert "--metrics-port: worker metrics need the prometheus_client package" in result.stderr
    assert "durable-django[prometheus]" in result.stderr


def test_a_killed_worker_ages_out_and_a_stopped_one_is_marked_gone(workers, admin_client, settings):
    from django.core.management import call_command

    settings.DURABLE = {**settings.DURABLE, "LEASE_SECONDS": 2}  # the workers' lease: live means seen within 6s
    held = api.enqueue("tests.slow", {"seconds": 60, "tag": "held"})
    killed = workers.start("--concurrency", "1", **SHORT_LEASE)
    wait_until(lambda: effects.exists("slow-started-held"), message="the first worker to take the run")
    effects.remove("slow-started-held")
    survivor = workers.start("--concurrency", "1", "--grace", "0.5", **SHORT_LEASE)
    wait_until(lambda: len(live_workers()) == 2, message="both workers to record themselves")
    assert '<a href="/admin/durable_django/worker/">Workers</a>' in admin_client.get("/admin/").content.decode()
    page = admin_client.get("/admin/durable_django/worker/").content.decode()
    assert page.count('<span class="durable-status durable-status-running">live</span>') == 2
    assert f'<td class="field-pid">{killed.pid}</td>' in page and str(survivor.pid) in page

    killed.send_signal(signal.SIGKILL)
    killed.wait(timeout=10)
    # Three leases (6s here) pass: the killed worker is not seen again, the survivor's heartbeat sees it anew.
    sql("UPDATE durable_worker SET last_seen_at = last_seen_at - interval '7 seconds'")
    wait_until(
        lambda: [worker.pid for worker in live_workers()] == [survivor.pid], message="the survivor to be seen again"
    )
    # The killed worker's run is the survivor's once its lease expires.
    wait_until(lambda: effects.exists("slow-started-held"), timeout=30, message="the survivor to take the run over")
    page = admin_client.get("/admin/durable_django/worker/").content.decode()
    assert page.count(">live</span>") == 1 and "not seen for" in page
    assert f'1 <a href="/admin/durable_django/run/{held.run_id}/change/"' in page
    call_command("durable_health")  # passes (exit 0) with one live worker

    survivor.send_signal(signal.SIGTERM)
    assert survivor.wait(timeout=30) == 0
    with pytest.raises(SystemExit) as failed:
        call_command("durable_health")
    assert failed.value.code == 1
    page = admin_client.get("/admin/durable_django/worker/").content.decode()
    assert ">live</span>" not in page and "stopped at" in page and "not seen for" in page
    assert status(held.run_id) == "pending"  # released at the graceful stop
    api.cancel(held.run_id)
