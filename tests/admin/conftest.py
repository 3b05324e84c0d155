"""Fixtures of the admin tests: users with chosen permissions and runs in every state."""

import uuid
from dataclasses import dataclass

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client

from durable_django import api
from durable_django.testing import make_due, run_until_idle
from tests.store.factories import claim

TENANT = "6f1c1d8e-5a7b-4c1e-9d8a-2b3c4d5e6f70"


@pytest.fixture
def staff_client(db):
    """A logged-in client for a staff user holding exactly the given permission codenames."""

    def make(*codenames: str) -> Client:
        user = User.objects.create_user(f"staff-{uuid.uuid4().hex[:8]}", password="pw", is_staff=True)
        user.user_permissions.set(
            Permission.objects.filter(content_type__app_label="durable_django", codename__in=codenames)
        )
        assert user.user_permissions.count() == len(codenames)
        client = Client()
        client.force_login(user)
        return client

    return make


@dataclass
class ExampleRuns:
    succeeded: str
    failed: str
    waiting: str
    pending: str
    running: str
    parent: str
    child: str
    keyed: str
    tenant_keyed: str


def claim_now(function: str) -> str:
    """Claim one pending run of ``function`` the way a worker does, and leave it running."""
    claimed = claim(limit=1, lease_seconds=300, worker_id="admin-tests:1", functions=[function])
    assert len(claimed) == 1
    return claimed[0].run_id


def status_of(run_id: str) -> str:
    return api.get_run(run_id).status


@pytest.fixture
def example_runs(transactional_db) -> ExampleRuns:
    """One run in each state, made by the real engine: steps journalled, errors stored, a child spawned."""
    succeeded = api.enqueue("tests.two_steps", {"second_sleep": 0}).run_id
    failed = api.enqueue("tests.always_fails", {"why": "to fail"}).run_id
    waiting = api.enqueue("tests.signal_waiter", {}).run_id
    parent = api.enqueue("tests.parent", {"child": {"wait_signal": True}}).run_id
    keyed = api.enqueue("tests.noop", {"k": 1}, idempotency_key="order-1").run_id
    tenant_keyed = api.enqueue("tests.noop", {"k": 2}, coalesce_key="order-1", tenant_id=TENANT).run_id
    run_until_idle(
        functions=[
            "tests.two_steps",
            "tests.always_fails",
            "tests.signal_waiter",
            "tests.parent",
            "tests.child",
            "tests.noop",
        ]
    )
    while status_of(failed) != "failed":  # each retry is due at once: the fixture does not wait out the backoff
        make_due(failed)
        assert run_until_idle(functions=["tests.always_fails"]) == 1
    child_id = api.list_runs(name="tests.child").items[0].run_id
    pending = api.enqueue("tests.quick_then_done", {"later": True}).run_id
    running = api.enqueue("tests.slow", {"seconds": 1}).run_id
    assert claim_now("tests.slow") == running
    runs = ExampleRuns(
        succeeded=succeeded,
        failed=failed,
        waiting=waiting,
        pending=pending,
        running=running,
        parent=parent,
        child=child_id,
        keyed=keyed,
        tenant_keyed=tenant_keyed,
    )
    expected = {
        "succeeded": "succeeded",
        "failed": "failed",
        "waiting": "waiting",
        "pending": "pending",
        "running": "running",
        "parent": "waiting",
        "child": "waiting",
        "keyed": "succeeded",
        "tenant_keyed": "succeeded",
    }
    assert {field: status_of(getattr(runs, field)) for field in expected} == expected
    return runs


def pytest_configure(config):
    config.addinivalue_line("markers", "scale: builds a table of a million runs once per module (about a minute)")
