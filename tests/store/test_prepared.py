"""The store prepares its statements on a direct connection, and not where a transaction pooler sits.

These run on the "direct" alias (the test database without a pooler, whatever
"default" goes through); tests/pooler shows the rule at work through PgBouncer.
"""

import pytest
from django.db import connections

from durable_django import api
from tests.store.factories import claim, complete

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "direct"])


@pytest.fixture
def direct(settings):
    settings.DURABLE = {**settings.DURABLE, "DATABASE": "direct"}
    connections["direct"].close()
    yield connections["direct"]
    connections["direct"].close()


def prepared_statements(conn) -> list[str]:
    with conn.cursor() as cur:  # Django's own cursor: never prepared itself
        cur.execute("SELECT statement FROM pg_prepared_statements")
        return [row[0] for row in cur.fetchall()]


def round_trip():
    run = api.enqueue("tests.noop", {"x": 1})
    [held] = claim()
    assert complete(held, '{"x": 1}') == "succeeded"
    assert api.get_run(run.run_id).output == {"x": 1}


def test_the_store_prepares_its_statements_on_its_own_connection(direct):
    round_trip()
    prepared = prepared_statements(direct)
    # enqueue, claim, complete, read: each prepared once on the server.
    for statement in (
        "INSERT INTO durable_run",
        "FOR UPDATE SKIP LOCKED",
        "SET status = 'succeeded'",
        "FROM durable_run\nWHERE run_id = %(run_id)s".replace("%(run_id)s", "$1"),
    ):
        assert sum(statement in text for text in prepared) == 1, (statement, prepared)


def test_prepared_statements_can_be_turned_off(direct, settings):
    settings.DURABLE = {**settings.DURABLE, "PREPARED_STATEMENTS": False}
    round_trip()
    assert prepared_statements(direct) == []
    assert direct.connection.prepare_threshold is None


def test_auto_prepares_nothing_on_an_alias_behind_a_transaction_pooler(direct, monkeypatch):
    """DISABLE_SERVER_SIDE_CURSORS, which Django asks for behind PgBouncer in transaction mode, turns it off."""
    monkeypatch.setitem(direct.settings_dict, "DISABLE_SERVER_SIDE_CURSORS", True)
    round_trip()
    assert prepared_statements(direct) == []
    assert direct.connection.prepare_threshold is None


def test_forced_on_it_prepares_even_behind_a_pooler(direct, monkeypatch, settings):
    settings.DURABLE = {**settings.DURABLE, "PREPARED_STATEMENTS": True}
    monkeypatch.setitem(direct.settings_dict, "DISABLE_SERVER_SIDE_CURSORS", True)
    round_trip()
    assert any("INSERT INTO durable_run" in text for text in prepared_statements(direct))
