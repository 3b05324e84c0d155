"""The runs search box's input terms, through Django's test client, and the index that serves them."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from durable_django import api
from durable_django.admin.search import input_document
from tests.admin.test_admin_pages import RUNS, listed_run_ids
from tests.helpers import sql
from tests.store.test_schema import plan_nodes

pytestmark = pytest.mark.django_db(transaction=True)


def test_input_terms_find_the_runs_whose_input_holds_those_values(admin_client):
    berlin = api.enqueue("tests.noop", {"customer": 42, "address": {"city": "Berlin"}})
    paris = api.enqueue("tests.noop", {"customer": 42, "address": {"city": "Paris"}})
    api.enqueue("tests.noop", {"customer": "42"})
    response = admin_client.get(RUNS, {"q": "input.customer=42"})
    assert response.status_code == 200
    assert listed_run_ids(response) == [paris.run_id, berlin.run_id]
    response = admin_client.get(RUNS, {"q": 'input.customer=42 input.address.city="Berlin"'})
    assert listed_run_ids(response) == [berlin.run_id]
    assert listed_run_ids(admin_client.get(RUNS, {"q": "input.address.city=Paris"})) == [paris.run_id]
    # Run ids still work beside them.
    assert listed_run_ids(admin_client.get(RUNS, {"q": berlin.run_id})) == [berlin.run_id]


@pytest.mark.parametrize("term", ["input.=3", "input.a", "input.a=1 b", "input.a=1 input.a=2", "input.a..b=1"])
def test_a_malformed_input_term_answers_the_invalid_search_page_never_a_500(admin_client, term):
    response = admin_client.get(RUNS, {"q": term})
    # The admin's answer to a search it cannot run: back to the listing with "?e=1".
    assert response.status_code == 302 and response["Location"].endswith("?e=1")


def test_terms_become_one_document():
    assert input_document('input.customer=42 input.address.city="Berlin" input.vip=true input.tag=x') == {
        "customer": 42,
        "address": {"city": "Berlin"},
        "vip": True,
        "tag": "x",
    }


def test_the_admin_search_reads_the_input_index(admin_client):
    sql("""
        INSERT INTO durable_run (run_id, name, version, status, input, retry_policy, created_at, updated_at)
        SELECT 'r-' || g, 'tests.noop', 1, 'succeeded', jsonb_build_object('customer', g), '{}',
               now() - make_interval(secs => g), now()
        FROM generate_series(1, 20000) g
    """)
    sql("ANALYZE durable_run")
    with CaptureQueriesContext(connection) as queries:
        response = admin_client.get(RUNS, {"q": "input.customer=777"})
    assert listed_run_ids(response) == ["r-777"]
    [listing] = [q["sql"] for q in queries.captured_queries if "@>" in q["sql"] and "LIMIT" in q["sql"]]
    [(plan,)] = sql("EXPLAIN (ANALYZE, FORMAT JSON) " + listing)
    nodes = list(plan_nodes(plan[0]["Plan"]))
    assert any(node.get("Index Name") == "durable_run_input" for node in nodes), nodes
