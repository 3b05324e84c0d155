"""Every filter the runs listing offers is served by an index: a filtered page reads the rows it shows.

The table mixes what a site holds: four busy functions and a rare one, one run in
ten under a tenant, a parent with children spread over the month, a backlog of
pending runs and runs a limit holds back. Each filter (and a filter by status and
function together) is requested through the admin; every statement the page runs
on ``durable_run`` is executed under ``EXPLAIN ANALYZE`` and may read at most
READ_BOUND rows (those it returns plus those an index scan or a filter threw
away): a filter whose predicate no index leads with reads the listing index
backward past every newer run of the other functions, or the whole table.
"""

import json
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from django.utils.http import urlencode

from tests.helpers import sql

pytestmark = pytest.mark.django_db(transaction=True)

FINISHED = 40_000
PENDING = 6_000
# One pending run in HELD_EVERY is of the rare function, held back by its concurrency key.
HELD_EVERY = 12
CHILDREN = 400
CHANGELIST = "/admin/durable_django/run/"
TENANT = "00000000-0000-4000-8000-000000000003"
PARENT = "done-20000"
HOLDER = "concurrency:tests.rare"
# The count probe reads up to 1,000 ids and a page 100 rows: a filter served by an index stays far below
# this, the rare function's filter without one reads the table (tens of thousands of rows).
READ_BOUND = 2_500

BUILD = [
    # Finished runs over thirty days, run 1 the oldest: four busy functions, a rare one (one run in 200),
    # one run in 25 failed, one in ten under one of ten tenants, the children of PARENT spread among them.
    f"""
    INSERT INTO durable_run (run_id, name, status, input, output, retry_policy, attempts, tenant_id,
                             parent_run_id, created_at, updated_at, finished_at)
    SELECT 'done-' || i,
           CASE WHEN i %% 200 = 7 THEN 'tests.rare' ELSE 'tests.busy' || (i %% 4) END,
           CASE WHEN i %% 25 = 1 THEN 'failed' ELSE 'succeeded' END,
           '{{}}', 'null', '{{}}', 1,
           CASE WHEN i %% 10 = 3 THEN ('00000000-0000-4000-8000-00000000000' || (i / 10 %% 10))::uuid END,
           CASE WHEN i %% ({FINISHED} / {CHILDREN}) = 5 AND i <> 20000 THEN '{PARENT}' END,
           t.at, t.at, t.at
    FROM generate_series(1, {FINISHED}) i
    CROSS JOIN LATERAL (
        SELECT now() - interval '1 hour' - make_interval(secs => ({FINISHED} - i) * 64.8) AS at) t
    """,
    # The newest runs: a pending backlog, and runs a limit holds back spread through it.
    f"""
    INSERT INTO durable_run (run_id, name, status, input, retry_policy, held_by, created_at, updated_at)
    SELECT 'todo-' || i, CASE WHEN i %% {HELD_EVERY} = 0 THEN 'tests.rare' ELSE 'tests.busy0' END,
           'pending', '{{}}', '{{}}', CASE WHEN i %% {HELD_EVERY} = 0 THEN '{HOLDER}' END, t.at, t.at
    FROM generate_series(1, {PENDING}) i
    CROSS JOIN LATERAL (SELECT now() - make_interval(secs => ({PENDING} - i) * 1.0) AS at) t
    """,
    "VACUUM ANALYZE durable_run",
]


@pytest.fixture
def mixed_table():
    for statement in BUILD:
        sql(statement)


def nodes(plan: dict):
    yield plan
    for child in plan.get("Plans", []):
        yield from nodes(child)


def rows_read(query: str) -> int:
    """Rows the statement's scans of durable_run produced or threw away, over all their loops."""
    with connection.cursor() as cur:
        cur.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + query)
        plan = cur.fetchone()[0]
    root = (json.loads(plan) if isinstance(plan, str) else plan)[0]["Plan"]
    return sum(
        (node["Actual Rows"] + node.get("Rows Removed by Filter", 0) + node.get("Rows Removed by Index Recheck", 0))
        * node["Actual Loops"]
        for node in nodes(root)
        if node.get("Relation Name") == "durable_run"
    )


def filtered_statements(client, query: dict[str, str]) -> list[str]:
    """The statements a filtered listing runs that read durable_run under the filter (not the overview)."""
    with CaptureQueriesContext(connection) as capture:
        response = client.get(f"{CHANGELIST}?{urlencode(query)}")
        assert response.status_code == 200, (query, response.status_code)
        assert "errornote" not in response.content.decode(), query
    statements = [
        q["sql"]
        for q in capture.captured_queries
        if q["sql"].lstrip().upper().startswith("SELECT") and 'FROM "durable_run"' in q["sql"] and " WHERE " in q["sql"]
    ]
    assert statements, query
    return statements


# Stands for the date filter's "past 7 days" bounds, computed when the test runs.
PAST_WEEK = "past-week"

FILTERS = {
    "status": {"status": "failed"},
    "a rare function": {"function": "tests.rare"},
    "a busy function": {"function": "tests.busy1"},
    "a rare function that failed": {"function": "tests.rare", "status": "failed"},
    "a rare function over the past week": {"function": "tests.rare", PAST_WEEK: ""},
    "a tenant": {"tenant": TENANT},
    "untagged runs": {"tenant": "none"},
    "held by any limit": {"held_by": "any"},
    "held by one key": {"held_by": HOLDER},
    "a parent's children": {"parent": PARENT},
    "the past week": {PAST_WEEK: ""},
}


def past_week() -> dict[str, str]:
    """The date filter's "past 7 days" bounds, as its own link gives them (aware, in the current zone)."""
    today = timezone.localtime().replace(hour=0, minute=0, second=0, microsecond=0)
    return {"created_at__gte": str(today - timedelta(days=7)), "created_at__lt": str(today + timedelta(days=1))}


def test_each_filter_reads_only_what_it_shows(mixed_table, admin_client):
    """One table for every filter (building it is most of the test's time)."""
    read = {}
    for label, query in FILTERS.items():
        query = dict(query)
        if query.pop(PAST_WEEK, None) is not None:
            query.update(past_week())
        read[label] = max(rows_read(statement) for statement in filtered_statements(admin_client, query))
    assert {label: rows for label, rows in read.items() if rows > READ_BOUND} == {}, read

    # The bound is met by the index, not by a page that shows fewer runs than match.
    response = admin_client.get(f"{CHANGELIST}?{urlencode({'function': 'tests.rare'})}")
    [(expected,)] = sql("SELECT count(*) FROM durable_run WHERE name = 'tests.rare'")
    assert response.context["cl"].result_count == expected
    assert len(response.context["cl"].result_list) == min(expected, 100)
