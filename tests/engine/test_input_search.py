"""list_runs(input_contains=...): runs whose input contains a JSON document, through the input's index."""

import pytest

from durable_django import api
from durable_django.exceptions import InvalidInput
from tests.helpers import sql
from tests.store.test_schema import plan_nodes

pytestmark = pytest.mark.django_db(transaction=True)


def test_it_finds_the_runs_whose_input_contains_the_document_newest_first_in_pages():
    berlin = [api.enqueue("tests.noop", {"customer": 42, "address": {"city": "Berlin"}, "n": n}) for n in range(3)]
    api.enqueue("tests.noop", {"customer": 42, "address": {"city": "Paris"}})
    api.enqueue("tests.noop", {"customer": "42", "address": {"city": "Berlin"}})
    api.enqueue("tests.noop", [1, 2])
    page = api.list_runs(input_contains={"customer": 42, "address": {"city": "Berlin"}}, limit=2)
    assert [run.run_id for run in page.items] == [berlin[2].run_id, berlin[1].run_id]
    rest = api.list_runs(input_contains={"customer": 42, "address": {"city": "Berlin"}}, cursor=page.next_cursor)
    assert [run.run_id for run in rest.items] == [berlin[0].run_id] and rest.next_cursor is None
    assert len(api.list_runs(input_contains={"customer": 42}).items) == 4
    assert api.list_runs(input_contains={"customer": 42}, status="running").items == []
    assert len(api.list_runs(input_contains=[1]).items) == 1


def test_a_document_json_cannot_hold_is_invalid_input():
    for bad in ({"a": float("nan")}, {"a": "\x00"}, {"a": object()}):
        with pytest.raises(InvalidInput):
            api.list_runs(input_contains=bad)


def test_the_search_reads_the_input_index_not_the_table():
    sql("""
        INSERT INTO durable_run (run_id, name, version, status, input, retry_policy, created_at, updated_at)
        SELECT 'r-' || g, 'tests.noop', 1, 'succeeded', jsonb_build_object('customer', g, 'city', 'x'), '{}',
               now() - make_interval(secs => g), now()
        FROM generate_series(1, 20000) g
    """)
    sql("ANALYZE durable_run")
    from durable_django.store.runs import LIST_RUNS_BY_INPUT

    params = {
        "input_contains": '{"customer": 4242}',
        "status": None,
        "name": None,
        "tenant_id": None,
        "after_created": None,
        "after_run": None,
        "limit": 51,
    }
    [(plan,)] = sql("EXPLAIN (ANALYZE, FORMAT JSON) " + LIST_RUNS_BY_INPUT, params)
    nodes = list(plan_nodes(plan[0]["Plan"]))
    assert any(node.get("Index Name") == "durable_run_input" for node in nodes), nodes
    assert max(node["Actual Rows"] + node.get("Rows Removed by Filter", 0) for node in nodes) <= 10, nodes
    assert [run.run_id for run in api.list_runs(input_contains={"customer": 4242}).items] == ["r-4242"]
