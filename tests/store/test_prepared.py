import pytest
from django.db import connection

from durable_django import api
from tests.store.factories import claim, complete

pytestmark = pytest.mark.django_db(transaction=True)


def prepared_statements() -> int:
    with connection.cursor() as cur:  # Django's own cursor: never prepared itself
        cur.execute("SELECT count(*) FROM pg_prepared_statements")
        return cur.fetchone()[0]


def round_trip():
    run = api.enqueue("tests.noop", {"x": 1})
    [held] = claim()
    assert complete(held, '{"x": 1}') == "succeeded"
    assert api.get_run(run.run_id).output == {"x": 1}


def test_the_store_prepares_its_statements_on_its_own_connection():
    connection.close()
    round_trip()
    assert prepared_statements() >= 3  # enqueue, claim, complete, read


def test_prepared_statements_can_be_turned_off_for_poolers(settings):
    settings.DURABLE = {**settings.DURABLE, "PREPARED_STATEMENTS": False}
    connection.close()
    round_trip()
    assert prepared_statements() == 0
    assert connection.connection.prepare_threshold is None
