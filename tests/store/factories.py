"""Factories for store-tier tests: runs made through the API, claimed through the store."""

from durable_django import api
from durable_django.store import runs as run_store
from durable_django.worker.loop import WorkerOptions, claim_bounds


def claim(limit=10, lease_seconds=30.0, worker_id="test-worker", **options):
    """Claim through the store as a worker with these options would."""
    bounds = claim_bounds(WorkerOptions(**options))
    return [run for run, _, _ in run_store.claim(limit=limit, lease_seconds=lease_seconds, worker_id=worker_id,
                                                  bounds=bounds)]


def enqueue_many(count, name="tests.noop", **kwargs):
    return [api.enqueue(name, {"n": index}, **kwargs) for index in range(count)]
