"""The store's timestamps are the aware datetimes Django gives, read by psycopg's C loader where that is the same."""

import pytest
from django.db import connection

from durable_django import api
from durable_django.store.db import cursor

pytestmark = pytest.mark.django_db(transaction=True)


def stored_times(run_id):
    """created_at and updated_at through Django's own cursor (its timestamptz loader)."""
    with connection.cursor() as cur:
        cur.execute("SELECT created_at, updated_at FROM durable_run WHERE run_id = %s", [run_id])
        return cur.fetchone()


def store_times(run_id):
    with cursor() as cur:
        cur.execute("SELECT created_at, updated_at FROM durable_run WHERE run_id = %s", [run_id])
        return cur.fetchone()


def same(ours, django):
    pairs = zip(ours, django, strict=True)
    return all(a == b and a.tzinfo == b.tzinfo and a.utcoffset() == b.utcoffset() for a, b in pairs)


def test_the_stores_datetimes_are_djangos():
    run = api.enqueue("tests.noop")
    assert same((run.created_at, run.updated_at), stored_times(run.run_id))
    assert same(store_times(run.run_id), stored_times(run.run_id))


def test_in_a_session_whose_time_zone_is_not_djangos_the_store_reads_what_django_reads():
    run = api.enqueue("tests.noop")
    with connection.cursor() as cur:
        cur.execute("SET TIME ZONE 'Asia/Tokyo'")
    try:
        assert connection.connection.info.timezone != connection.timezone
        assert same(store_times(run.run_id), stored_times(run.run_id))
    finally:
        connection.close()
