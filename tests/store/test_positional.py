"""A long statement converted once to PostgreSQL's placeholders runs as its named form does."""

import pytest
from django.db import connections
from django.test.utils import CaptureQueriesContext

from durable_django.store import positional
from durable_django.store.positional import PositionalStatement

pytestmark = pytest.mark.django_db(transaction=True)


def test_named_placeholders_become_numbered_ones_once_each():
    statement = PositionalStatement.of("SELECT %(a)s, %(b)s::int, %(a)s || 'x%%' WHERE %(c)s")
    assert statement.positional == "SELECT $1, $2::int, $1 || 'x%' WHERE $3"
    assert statement.names == ("a", "b", "c")
    assert statement.values({"c": True, "a": "one", "b": 2, "unused": 9}) == ["one", 2, True]


@pytest.mark.parametrize("placeholder", ["%s", "%(a)b", "%(a)t"])
def test_any_other_placeholder_is_refused(placeholder):
    with pytest.raises(ValueError, match="only %\\(name\\)s placeholders"):
        PositionalStatement.of(f"SELECT {placeholder}")


STATEMENT = PositionalStatement.of(
    "SELECT %(word)s || '%%', %(number)s::int + %(number)s::int, now() > %(since)s::timestamptz"
)
PARAMS = {"word": "fifty", "number": 21, "since": "2000-01-01T00:00:00Z"}


def test_it_gives_the_same_rows_sent_raw_and_through_djangos_cursor_while_queries_are_logged():
    raw_rows = positional.fetch_all(STATEMENT, PARAMS)
    with CaptureQueriesContext(connections["default"]) as captured:
        logged_rows = positional.fetch_all(STATEMENT, PARAMS)
    assert [tuple(row) for row in raw_rows] == [tuple(row) for row in logged_rows] == [("fifty%", 42, True)]
    # While queries are logged Django sees the statement as written, with its named placeholders.
    assert [query["sql"] for query in captured.captured_queries] == [
        "SELECT 'fifty' || '%', 21::int + 21::int, now() > '2000-01-01T00:00:00Z'::timestamptz"
    ]
