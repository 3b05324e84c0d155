"""The claim loop looks for runs whose lease ran out once a second while it has other work, and at once
whenever a claim finds nothing else."""

import pytest

from durable_django import api
from durable_django.engine import lifecycle
from durable_django.worker.claiming import Claimer
from durable_django.worker.slots import SlotPool
from durable_django.worker.stats import Stats
from tests.helpers import sql

pytestmark = pytest.mark.django_db(transaction=True)

BOUNDS = lifecycle.claim_bounds(functions=None, queues=None, tenant_id=None)


def claimer(pool, **options):
    return Claimer(
        pool, worker_id="w", bounds=BOUNDS, stats=Stats(), on_database=lambda up: None, **options
    )


def claim_and_let_go(pool, claiming):
    """One claim pass; the slots take what it claimed and are done with it at once (the runs stay running)."""
    claimed, _ = claiming.claim()
    for attempt in claimed:
        assert pool.take(0) is attempt
        pool.done(0, attempt)
    return [attempt.run.run_id for attempt in claimed]


def expired_run(priority):
    """A run whose holder's lease ran out, first in claim order (its priority) if the claim looks for it."""
    run = api.enqueue("tests.noop", {"expired": True}, priority=priority)
    [held] = lifecycle.claim(limit=1, start_now=1, worker_id="dead", bounds=BOUNDS)
    assert held.run.run_id == run.run_id
    sql("UPDATE durable_run SET leased_until = now() - interval '1 second' WHERE run_id = %s", [run.run_id])
    return run.run_id


def test_with_other_work_due_a_run_whose_lease_ran_out_waits_for_the_next_look():
    pool = SlotPool(2)
    claiming = claimer(pool, recovery_check_seconds=3600)
    backlog = [run.run_id for run in api.enqueue_many("tests.noop", [{"n": n} for n in range(6)])]
    first = claim_and_let_go(pool, claiming)  # the first pass looks (none has looked yet)
    expired = expired_run(priority=100)
    taken = []
    while len(taken) < 4:  # the rest of the backlog, two a pass: each pass finds other work
        taken += claim_and_let_go(pool, claiming)
    assert sorted(first + taken) == sorted(backlog)
    # Nothing else is due: the pass looks at once, an hour before its next look was due.
    assert claim_and_let_go(pool, claiming) == [expired]


def test_a_pass_looks_when_its_second_has_come_even_with_other_work_due():
    pool = SlotPool(2)
    claiming = claimer(pool, recovery_check_seconds=0.0)  # every pass is due to look
    api.enqueue_many("tests.noop", [{"n": n} for n in range(6)])
    expired = expired_run(priority=100)
    assert expired in claim_and_let_go(pool, claiming)
