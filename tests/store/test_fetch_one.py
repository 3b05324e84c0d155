"""The hot statements' way to the server (``db.fetch_one``): a kept cursor, with Django's checks and errors."""

import pytest
from django.db import DEFAULT_DB_ALIAS, DataError, connection, connections, transaction
from django.db.utils import ProgrammingError
from django.test.utils import CaptureQueriesContext

from durable_django import api
from durable_django.store import db
from tests.store.test_times import same, stored_times

pytestmark = pytest.mark.django_db(transaction=True)


def backend_pid():
    return db.fetch_one("SELECT pg_backend_pid()", None)[0]


def test_it_keeps_one_cursor_per_connection_and_a_new_one_after_a_reconnect():
    own = connections[DEFAULT_DB_ALIAS]
    first = backend_pid()
    kept = db._KEPT[own]
    assert backend_pid() == first and db._KEPT[own] is kept
    own.close()
    assert kept[0].closed
    # The closed connection's cursor is not used (it would raise): Django opens another, and a cursor is kept
    # on that one. (Behind a pooler the new connection may reach the same server session: no pid check.)
    assert backend_pid()
    assert db._KEPT[own] is not kept and db._KEPT[own][0] is own.connection and not own.connection.closed


def test_captured_queries_see_the_store_statements_it_sends():
    api.enqueue("tests.noop")  # a cursor is kept on the connection already
    with CaptureQueriesContext(connection) as captured:
        run = api.enqueue("tests.noop")
    assert [query["sql"] for query in captured.captured_queries if "INSERT INTO durable_run" in query["sql"]]
    assert api.get_run(run.run_id) is not None


def test_an_execute_wrapper_sees_the_store_statements_it_sends():
    api.enqueue("tests.noop")
    seen = []

    def wrapper(execute, sql, params, many, context):
        seen.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(wrapper):
        api.enqueue("tests.noop")
    assert any("INSERT INTO durable_run" in sql for sql in seen)


def test_its_errors_are_djangos_with_psycopgs_as_their_cause():
    backend_pid()
    with pytest.raises(DataError) as raised:
        db.fetch_one("SELECT 1 / %s", [0])
    assert type(raised.value.__cause__).__name__ == "DivisionByZero"


def test_inside_a_broken_atomic_block_it_refuses_as_djangos_cursor_does():
    from django.db.transaction import TransactionManagementError

    backend_pid()
    with transaction.atomic():
        with pytest.raises(ProgrammingError), transaction.atomic():  # a savepoint rolled back: the outer block lives
            db.fetch_one("SELECT * FROM no_such_table", None)
        connection.needs_rollback = True
        with pytest.raises(TransactionManagementError):
            backend_pid()
        connection.needs_rollback = False


def test_a_session_whose_time_zone_is_not_djangos_reads_what_django_reads():
    run = api.enqueue("tests.noop")  # the cursor kept while the time zones agreed
    with connection.cursor() as cur:
        cur.execute("SET TIME ZONE 'Asia/Tokyo'")
    try:
        row = db.fetch_one("SELECT created_at, updated_at FROM durable_run WHERE run_id = %s", [run.run_id])
        assert same(row, stored_times(run.run_id))
    finally:
        connection.close()
