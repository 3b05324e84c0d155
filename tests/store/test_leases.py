"""Leases renewed beside a run's row while another transaction holds its lock (store/leases.py)."""

import threading

import pytest
from django.db import connection, transaction

from durable_django import api
from durable_django.store import leases
from tests.helpers import sql
from tests.store.factories import claim

pytestmark = pytest.mark.django_db(transaction=True)


def locked_while(run_id, body):
    """Run ``body`` while a client transaction in another thread holds ``run_id``'s row lock."""
    locked, done = threading.Event(), threading.Event()

    def client():
        try:
            with transaction.atomic():
                sql("SELECT 1 FROM durable_run WHERE run_id = %s FOR UPDATE", [run_id])
                locked.set()
                done.wait(30)
        finally:
            connection.close()

    thread = threading.Thread(target=client)
    thread.start()
    try:
        assert locked.wait(30)
        return body()
    finally:
        done.set()
        thread.join(30)


def test_a_locked_run_is_renewed_beside_its_row_and_no_claim_takes_it_until_that_renewal_runs_out():
    api.enqueue("tests.noop", {})
    [held] = claim()
    sql("UPDATE durable_run SET leased_until = now() - interval '1 second' WHERE run_id = %s", [held.run_id])
    renewals = locked_while(held.run_id, lambda: leases.heartbeat([(held.run_id, held.attempts)], 30))
    assert renewals == {(held.run_id, held.attempts): leases.Renewal(renewed=True, cancel_requested=False, held=True)}
    assert sql("SELECT token FROM durable_lease_renewal WHERE run_id = %s", [held.run_id]) == [(held.attempts,)]
    assert claim() == []  # its row's lease has run out, the renewal beside it has not
    # A stale holder's beat leaves its successor's renewal alone; the holder's next beat on the row drops it.
    leases.heartbeat([(held.run_id, held.attempts - 1)], 30)
    assert sql("SELECT count(*) FROM durable_lease_renewal") == [(1,)]
    leases.heartbeat([(held.run_id, held.attempts)], 30)
    assert sql("SELECT count(*) FROM durable_lease_renewal") == [(0,)]
    sql("UPDATE durable_run SET leased_until = now() - interval '1 second' WHERE run_id = %s", [held.run_id])
    [reclaimed] = claim()
    assert (reclaimed.run_id, reclaimed.attempts) == (held.run_id, held.attempts + 1)
