"""Factories for store-tier tests: runs made through the API, claimed through the store."""

from durable_django import api
from durable_django.store import landing
from durable_django.testing import claim  # noqa: F401  (the factories' claim: a worker's, held)


def enqueue_many(count, name="tests.noop", **kwargs):
    return [api.enqueue(name, {"n": index}, **kwargs) for index in range(count)]


def complete(run, output_json: str) -> str | None:
    """Land a claimed run succeeded through the store; 'succeeded', or None if the fence refused it."""
    landed = landing.complete_many([landing.Finished(run.run_id, run.attempts, output_json, run.parent_run_id)])
    return "succeeded" if run.run_id in landed else None


def fail(run, **options) -> str | None:
    """Record a failed attempt of a claimed run through the store; its new status, or None."""
    return landing.fail(run.run_id, run.attempts, run.parent_run_id, **options)
