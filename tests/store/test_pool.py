"""The engine's connections (store/pool.py): bounded, lent to one thread at a time, swapped in and back."""

import psycopg
import pytest
from django.db import DatabaseError, connection, connections, transaction

from durable_django import api
from durable_django.conf import durable_settings
from durable_django.store import db, pool
from tests.helpers import run_in_threads, subprocess_database_url

pytestmark = pytest.mark.django_db(transaction=True)

NAME = "durable_worker test-pool"


@pytest.fixture
def engine_pool():
    with pool.installed(durable_settings.DATABASE, 3, NAME) as installed:
        yield installed


def backend_pid() -> int:
    with connections[durable_settings.DATABASE].cursor() as cur:
        cur.execute("SELECT pg_backend_pid()")
        return cur.fetchone()[0]


def named_sessions() -> list[tuple[int, str]]:
    with connection.cursor() as cur:
        # This database's only: another xdist worker may have a pool of the same name on the same server.
        cur.execute(
            "SELECT pid, query FROM pg_stat_activity WHERE datname = current_database() AND application_name = %s "
            "ORDER BY pid",
            [NAME],
        )
        return cur.fetchall()


def test_sixteen_threads_share_at_most_the_pools_connections(engine_pool):
    seen = []

    def work(index):
        with pool.borrowed():
            seen.append(backend_pid())
            api.enqueue("tests.noop", {"n": index})  # a store statement, prepared, on the borrowed connection
        return index

    run_in_threads(16, work)
    assert len(seen) == 16 and len(set(seen)) <= 3
    assert {pid for pid, _ in named_sessions()} == set(seen)
    with connection.cursor() as cur:
        cur.execute("SELECT count(*) FROM durable_run")
        assert cur.fetchone()[0] == 16


def test_a_borrowed_connection_is_the_threads_connection_for_the_block_and_the_own_one_comes_back(engine_pool):
    own = connections[durable_settings.DATABASE]
    own_pid = backend_pid()
    with pool.borrowed():
        borrowed = connections[durable_settings.DATABASE]
        assert borrowed is not own and backend_pid() != own_pid
        with transaction.atomic(using=durable_settings.DATABASE):  # Django's transactions run on it too
            assert borrowed.in_atomic_block and not own.in_atomic_block
            with pool.borrowed():  # nested: the same connection
                assert connections[durable_settings.DATABASE] is borrowed
    assert connections[durable_settings.DATABASE] is own and backend_pid() == own_pid


def test_a_lent_connection_is_the_pools_and_leaves_the_threads_own_in_place_unless_a_borrow_nests(engine_pool):
    own = connections[durable_settings.DATABASE]
    with pool.lent() as lent:
        assert lent is not own and connections[durable_settings.DATABASE] is own
        assert db.fetch_one(
            "SELECT application_name FROM pg_stat_activity WHERE pid = pg_backend_pid()", None, lent
        ) == (NAME,)
        with pool.borrowed():  # nested: the lent connection becomes the thread's for the block
            assert connections[durable_settings.DATABASE] is lent
            with pool.lent() as again:
                assert again is lent
        assert connections[durable_settings.DATABASE] is own
    with pool.borrowed(), pool.lent() as inside:  # nested in a borrow: the borrowed connection
        assert inside is connections[durable_settings.DATABASE] is not own
    assert connections[durable_settings.DATABASE] is own


def test_a_connection_that_raised_a_database_error_is_closed_and_the_next_borrow_opens_another(engine_pool):
    with pool.borrowed():
        first = backend_pid()
    with pytest.raises(DatabaseError), pool.borrowed():
        with psycopg.connect(subprocess_database_url(), autocommit=True) as other:
            other.execute("SELECT pg_terminate_backend(%s)", [first])
        backend_pid()  # the connection was cut
    with pool.borrowed():
        assert backend_pid() != first


def test_a_connection_left_inside_a_transaction_goes_back_closed(engine_pool):
    with pool.borrowed():
        first = backend_pid()
        connections[durable_settings.DATABASE].set_autocommit(False)
    with pool.borrowed():
        assert backend_pid() != first
        assert connections[durable_settings.DATABASE].get_autocommit()


def test_engine_connections_are_named_and_prepare_the_stores_statements(engine_pool):
    with pool.borrowed():
        api.enqueue("tests.noop")
        with connections[durable_settings.DATABASE].cursor() as cur:
            cur.execute("SELECT current_setting('application_name'), count(*) FROM pg_prepared_statements")
            name, prepared = cur.fetchone()
    assert name == NAME and prepared >= 1


def test_without_a_pool_a_borrow_is_the_callers_own_connection_and_transaction():
    with transaction.atomic(using=durable_settings.DATABASE):
        own_pid = backend_pid()
        with pool.borrowed():
            assert backend_pid() == own_pid
            assert connections[durable_settings.DATABASE].in_atomic_block


def test_an_alias_that_names_its_connections_keeps_that_name_for_the_engines():
    options = connections[durable_settings.DATABASE].settings_dict["OPTIONS"]
    options["application_name"] = "shop-worker"
    try:
        with pool.installed(durable_settings.DATABASE, 1, NAME):
            with pool.borrowed(), connections[durable_settings.DATABASE].cursor() as cur:
                cur.execute("SELECT current_setting('application_name')")
                assert cur.fetchone()[0] == "shop-worker"
            assert pool.session_name() == {"application_name": "shop-worker"}
    finally:
        del options["application_name"]
