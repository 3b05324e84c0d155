import pytest
from django.db import connection

from durable_django import api
from tests.store.factories import claim, complete

pytestmark = pytest.mark.django_db(transaction=True)


def prepared_statements() -> list[str]:
    with connection.cursor() as cur:  # Django's own cursor: never prepared itself
        cur.execute("SELECT statement FROM pg_prepared_statements")
        return [row[0] for row in cur.fetchall()]


def round_trip():
    run = api.enqueue("tests.noop", {"x": 1})
    [held] = claim()
    assert complete(held, '{"x": 1}') == "succeeded"
    assert api.get_run(run.run_id).output == {"x": 1}


def test_the_store_prepares_its_statements_on_its_own_connection():
    connection.close()
    round_trip()
    prepared = prepared_statements()
    # enqueue, claim, complete, read: each prepared once on the server.
    for statement in (
        "INSERT INTO durable_run",
        "FOR UPDATE SKIP LOCKED",
        "SET status = 'succeeded'",
        "FROM durable_run\nWHERE run_id = %(run_id)s".replace("%(run_id)s", "$1"),
    ):
        assert sum(statement in text for text in prepared) == 1, (statement, prepared)


def test_prepared_statements_can_be_turned_off_for_poolers(settings):
    settings.DURABLE = {**settings.DURABLE, "PREPARED_STATEMENTS": False}
    connection.close()
    round_trip()
    assert prepared_statements() == []
    assert connection.connection.prepare_threshold is None
