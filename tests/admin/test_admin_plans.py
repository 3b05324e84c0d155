"""The plans of the admin's listing, overview and run page on tens of thousands of runs: indexes, bounded queries.

The table is shaped like a large site's, a hundred times smaller than the
benchmark's (bench/bench_big.py): finished runs with three journal entries each
over a month, and the newest runs a backlog of pending ones. After VACUUM ANALYZE,
every query these pages run on durable_run and durable_step is planned through
an index: no sequential scan, except an unfiltered probe that a LIMIT stops.
"""

import json

import pytest
from django.contrib.admin.utils import quote
from django.db import connection
from django.test.utils import CaptureQueriesContext

from durable_django.store import overview as overview_store
from tests.helpers import sql

pytestmark = pytest.mark.django_db(transaction=True)

FINISHED = 30_000
PENDING = 3_000
CHANGELIST = "/admin/durable_django/run/"
MAX_QUERIES = 20
TABLES = ("durable_run", "durable_step")

# Finished runs over thirty days (run 1 the oldest), one in 25 failed, three journal entries each; then the
# pending backlog, the newest runs of all.
BUILD = [
    f"""
    WITH made AS (
        INSERT INTO durable_run (run_id, name, status, input, output, retry_policy, attempts, created_at,
                                 updated_at, finished_at)
        SELECT 'done-' || i, 'tests.noop', CASE WHEN i %% 25 = 1 THEN 'failed' ELSE 'succeeded' END,
               jsonb_build_object('i', i), 'null', '{{}}', 1, t.at, t.at, t.at
        FROM generate_series(1, {FINISHED}) i
        CROSS JOIN LATERAL (
            SELECT now() - interval '1 hour' - make_interval(secs => ({FINISHED} - i) * 86.4) AS at) t
        RETURNING run_id, created_at
    )
    INSERT INTO durable_step (run_id, step_id, result, created_at)
    SELECT run_id, 'v1:step:' || n, 'null', created_at FROM made, generate_series(0, 2) n
    """,
    f"""
    INSERT INTO durable_run (run_id, name, status, input, retry_policy, created_at, updated_at)
    SELECT 'todo-' || i, 'tests.noop', 'pending', '{{}}', '{{}}', t.at, t.at
    FROM generate_series(1, {PENDING}) i
    CROSS JOIN LATERAL (SELECT now() - make_interval(secs => ({PENDING} - i) * 1.0) AS at) t
    """,
    "VACUUM ANALYZE durable_run",
    "VACUUM ANALYZE durable_step",
]


@pytest.fixture
def big_enough():
    for statement in BUILD:
        sql(statement)


def plan_of(query: str) -> dict:
    with connection.cursor() as cur:
        cur.execute("EXPLAIN (FORMAT JSON) " + query)
        plan = cur.fetchone()[0]
    return (json.loads(plan) if isinstance(plan, str) else plan)[0]["Plan"]


def nodes(plan: dict, parent: dict | None = None):
    yield plan, parent
    for child in plan.get("Plans", []):
        yield from nodes(child, plan)


def unbounded_sequential_scans(plan: dict) -> list[str]:
    """Sequential scans of the durable tables, but for an unfiltered one a LIMIT stops after a few rows."""
    return [
        node["Relation Name"]
        for node, parent in nodes(plan)
        if node["Node Type"] == "Seq Scan"
        and node.get("Relation Name") in TABLES
        and ("Filter" in node or parent is None or parent["Node Type"] != "Limit")
    ]


def indexes_used(plan: dict) -> set[str]:
    return {node["Index Name"] for node, _ in nodes(plan) if "Index Name" in node}


def captured(call) -> list[str]:
    """The statements on the durable tables that ``call`` runs (each planned through an index)."""
    with CaptureQueriesContext(connection) as capture:
        call()
    assert len(capture.captured_queries) <= MAX_QUERIES, len(capture.captured_queries)
    queries = [
        query["sql"]
        for query in capture.captured_queries
        if any(table in query["sql"] for table in TABLES)
        and query["sql"].lstrip().upper().startswith(("SELECT", "WITH"))
    ]
    for query in queries:
        assert unbounded_sequential_scans(plan_of(query)) == [], query
    return queries


def listing_plan(queries: list[str]) -> dict:
    """The plan of the page's ids in listing order (its rows are then read by primary key: admin/pagination.py);
    a listing of one page reads its rows at once."""
    ordered = [q for q in queries if 'ORDER BY "durable_run"."created_at" DESC, "durable_run"."run_id" DESC' in q]
    [query] = [q for q in ordered if " LIMIT " in q] or ordered
    return plan_of(query)


def get(client, url: str):
    def call():
        response = client.get(url)
        assert response.status_code == 200, url

    return call


def test_the_listing_reads_the_listing_index_and_a_status_filter_its_own(big_enough, admin_client):
    queries = captured(get(admin_client, CHANGELIST))
    assert "durable_run_listing" in indexes_used(listing_plan(queries))
    # The newest runs are pending: the first failed one lies behind all of them in the listing index.
    failed = captured(get(admin_client, f"{CHANGELIST}?status=failed"))
    assert "durable_run_status_listing" in indexes_used(listing_plan(failed))


def test_the_overview_counts_from_the_listing_index_alone(big_enough):
    [window] = [q for q in captured(overview_store.overview) if "interval '1 day'" in q]
    plan = plan_of(window)
    scans = [(node["Node Type"], node.get("Index Name")) for node, _ in nodes(plan) if "Scan" in node["Node Type"]]
    assert scans == [("Index Only Scan", "durable_run_listing")], scans


def test_a_run_page_reads_its_run_and_journal_by_key(big_enough, admin_client):
    queries = captured(get(admin_client, f"{CHANGELIST}{quote('done-15000')}/change/"))
    used = set().union(*(indexes_used(plan_of(query)) for query in queries))
    assert {"durable_run_pkey", "durable_step_pkey"} <= used, used
