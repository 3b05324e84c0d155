"""A real worker's metrics port: loopback unless configured, /metrics alone, and a bounded queue label set."""

import socket
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from durable_django import api
from durable_django.worker.metrics import MAX_QUEUE_LABELS, OTHER_QUEUE
from tests.helpers import wait_until
from tests.process.test_observability_processes import free_port

pytestmark = [pytest.mark.process, pytest.mark.django_db(transaction=True)]


def another_address() -> str:
    """An address of this host that is not 127.0.0.1: the one it reaches other hosts from, else 127.0.0.2
    (Linux answers the whole of 127/8, and a server bound to 127.0.0.1 alone refuses it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # a documentation address: nothing is sent
            address = probe.getsockname()[0]
        except OSError:
            address = "127.0.0.2"
    return "127.0.0.2" if address in ("0.0.0.0", "127.0.0.1") else address


def get(host: str, port: int, path: str = "/metrics") -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://{host}:{port}{path}", timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def serving(host: str, port: int) -> bool:
    try:
        return get(host, port)[0] == 200
    except OSError:
        return False


def samples(text: str) -> dict[tuple[str, tuple], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_the_port_binds_loopback_by_default(workers):
    port = free_port()
    workers.start("--concurrency", "1", "--metrics-port", str(port))
    wait_until(lambda: serving("127.0.0.1", port), message="the metrics port to serve")
    elsewhere = another_address()
    with pytest.raises(OSError):
        get(elsewhere, port)


def test_the_port_answers_404_anywhere_but_metrics(workers):
    port = free_port()
    workers.start("--concurrency", "1", "--metrics-port", str(port))
    wait_until(lambda: serving("127.0.0.1", port), message="the metrics port to serve")
    status, body = get("127.0.0.1", port, "/metrics")
    assert status == 200 and "durable_worker_slots" in body
    for path in ("/", "/metrics/", "/favicon.ico", "/anything?name[]=durable_worker_slots", "/metricsx"):
        status, body = get("127.0.0.1", port, path)
        assert (status, "durable_" in body) == (404, False), path


def test_metrics_address_opts_in_to_every_interface(workers):
    port = free_port()
    workers.start("--concurrency", "1", "--metrics-port", str(port), DURABLE_TEST_METRICS_ADDRESS="0.0.0.0")
    elsewhere = another_address()
    wait_until(lambda: serving(elsewhere, port), message=f"the metrics port to serve on {elsewhere}")
    assert serving("127.0.0.1", port)


def test_queue_names_beyond_the_label_bound_share_one_label(workers):
    queues = [f"tenant-queue-{n}" for n in range(MAX_QUEUE_LABELS + 10)]
    runs = [api.enqueue("tests.noop", {"n": n}, queue=queue) for n, queue in enumerate(queues)]
    port = free_port()
    workers.start("--concurrency", "4", "--metrics-port", str(port), DURABLE_TEST_POLL_SECONDS="1")
    wait_until(
        lambda: all(api.get_run(run.run_id).status == "succeeded" for run in runs),
        timeout=120,
        message="every run to succeed",
    )

    def lag_counts() -> dict[str, float]:
        scraped = samples(get("127.0.0.1", port)[1])
        return {
            dict(labels)["queue"]: value
            for (name, labels), value in scraped.items()
            if name == "durable_queue_lag_seconds_count"
        }

    wait_until(lambda: sum(lag_counts().values()) == len(runs), message="every attempt to be counted")
    counts = lag_counts()
    assert len(counts) == MAX_QUEUE_LABELS + 1, sorted(counts)
    assert counts[OTHER_QUEUE] == 10
    assert set(counts) - {OTHER_QUEUE} <= set(queues)
    scraped = samples(get("127.0.0.1", port)[1])
    gauge_queues = {dict(labels)["queue"] for (name, labels) in scraped if name == "durable_runs"}
    assert gauge_queues <= set(counts) | {"default"}, sorted(gauge_queues - set(counts))
