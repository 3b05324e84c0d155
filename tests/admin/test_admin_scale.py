"""The runs admin, the workers page, the health check and the runs gauge on a table of 1,000,000 runs: bounded
queries, no full count, no full sort.

The table is built once for this module with one ``INSERT ... SELECT
generate_series`` (the secondary indexes created again afterwards, as they were)
and ANALYZE, and emptied afterwards so no other test sees it.
"""

import hashlib
import json
import time
import uuid

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from durable_django.store import overview as overview_store

# One group, so a parallel run (pytest -n, which distributes by --dist loadgroup) builds the table once, on one worker.
pytestmark = [pytest.mark.scale, pytest.mark.django_db, pytest.mark.xdist_group("million_runs")]

ROWS = 1_000_000
TENANT = "0d5cfa55-3c3b-4b8e-8d7e-6a1f0e0c9a11"
CHANGELIST = "/admin/durable_django/run/"

# Statuses in a realistic mix; run i is created 2 seconds before run i - 1.
BUILD = f"""
INSERT INTO durable_run (
    run_id, name, version, status, input, retry_policy, queue, priority, tenant_id,
    idempotency_key, coalesce_key, attempts, waiting_for, leased_until, finished_at, created_at, updated_at)
SELECT
    md5(i::text)::uuid::text,
    (ARRAY['scale.alpha', 'scale.beta', 'scale.gamma'])[1 + i % 3],
    1,
    s.status,
    jsonb_build_object('i', i),
    '{{}}'::jsonb,
    'default',
    0,
    CASE WHEN i % 10 = 0 THEN '{TENANT}'::uuid END,
    CASE WHEN i % 100 = 0 THEN (CASE WHEN i % 10 = 0 THEN '{TENANT}' ELSE '' END) || ':order-' || i END,
    CASE WHEN i % 100 = 50 THEN ':batch-' || i END,
    CASE WHEN s.status = 'pending' THEN 0 ELSE 1 END,
    CASE WHEN s.status = 'waiting' THEN 'signal:approval:0' END,
    CASE WHEN s.status = 'running' THEN now() + interval '1 day' END,  -- live past a slow build and every test
    CASE WHEN s.status IN ('succeeded', 'failed', 'cancelled') THEN now() - make_interval(secs => i * 2) END,
    now() - make_interval(secs => i * 2),
    now() - make_interval(secs => i * 2)
FROM generate_series(1, {ROWS}) AS i
CROSS JOIN LATERAL (
    SELECT (ARRAY['succeeded', 'succeeded', 'succeeded', 'succeeded', 'failed', 'cancelled',
                  'pending', 'running', 'waiting', 'succeeded'])[1 + i % 10] AS status
) s
"""

# The definitions of durable_run's indexes that back no constraint (the primary key and unique ones stay).
SECONDARY_INDEXES = """
SELECT index.relname, pg_get_indexdef(index.oid)
FROM pg_index JOIN pg_class index ON index.oid = pg_index.indexrelid
WHERE pg_index.indrelid = 'durable_run'::regclass
  AND NOT EXISTS (SELECT 1 FROM pg_constraint WHERE pg_constraint.conindid = index.oid)
"""


@pytest.fixture(scope="module")
def million_runs(django_db_setup, django_db_blocker):
    with django_db_blocker.unblock():
        started = time.monotonic()
        with connection.cursor() as cur:
            # Indexes built once over the full table cost a fraction of a million index insertions: the
            # indexes no constraint owns are dropped, the rows inserted, and each index created again as it was.
            cur.execute(SECONDARY_INDEXES)
            indexes = cur.fetchall()
            for name, _ in indexes:
                cur.execute(f'DROP INDEX "{name}"')
            cur.execute(BUILD)
            cur.execute("SET maintenance_work_mem = '256MB'")
            for _, definition in indexes:
                cur.execute(definition)
            cur.execute("RESET maintenance_work_mem")
            cur.execute("ANALYZE durable_run")
        print(f"built {ROWS} runs in {time.monotonic() - started:.1f}s")
        yield ROWS
        with connection.cursor() as cur:
            cur.execute("TRUNCATE durable_run, durable_step, durable_signal")


def run_id_of(i: int) -> str:
    """The run id BUILD gives run number ``i``."""
    return str(uuid.UUID(hashlib.md5(str(i).encode()).hexdigest()))


SCANS = {"Seq Scan", "Index Scan", "Index Only Scan", "Bitmap Heap Scan"}
# Most rows one query may read from durable_run: the overview's window cap, plus a probe's worth.
MAX_ROWS_READ = overview_store.OVERVIEW_CAP + 1_000
MAX_QUERIES = 20
MAX_SORTED_ROWS = 1_000


def analyze(query: str) -> dict:
    with connection.cursor() as cur:
        cur.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + query)
        plan = cur.fetchone()[0]
    return (json.loads(plan) if isinstance(plan, str) else plan)[0]["Plan"]


def nodes(plan: dict):
    yield plan
    for child in plan.get("Plans", []):
        yield from nodes(child)


def rows_read_from_runs(plan: dict) -> int:
    """Rows the executed plan read from durable_run: returned plus filtered out, over every loop."""
    return sum(
        (
            node.get("Actual Rows", 0)
            + node.get("Rows Removed by Filter", 0)
            + node.get("Rows Removed by Index Recheck", 0)
        )
        * node.get("Actual Loops", 1)
        for node in nodes(plan)
        if node.get("Relation Name") == "durable_run" and node["Node Type"] in SCANS
    )


def page_queries(client, url, django_assert_max_num_queries):
    with django_assert_max_num_queries(MAX_QUERIES), CaptureQueriesContext(connection) as captured:
        response = client.get(url)
    assert response.status_code == 200, (url, response.status_code)
    return response, [query["sql"] for query in captured.captured_queries]


def listing_query(queries: list[str]) -> str:
    """The page's ids in listing order (its rows are then read by primary key: admin/pagination.py); a listing
    of one page reads its rows at once."""
    ordered = [
        q
        for q in queries
        if 'ORDER BY "durable_run"."created_at" DESC, "durable_run"."run_id" DESC' in q
        and q.lstrip().startswith("SELECT")
    ]
    [query] = [q for q in ordered if " LIMIT " in q] or ordered
    return query


def test_runs_admin_stays_bounded_on_a_million_runs(million_runs, admin_client, django_assert_max_num_queries):
    newest, tenant_key, untagged_key, batch_key = 1, 500, 700, 150
    pages = {
        CHANGELIST: [run_id_of(newest)],
        f"{CHANGELIST}?p=2": [run_id_of(101)],
        f"{CHANGELIST}?p=100": [run_id_of(9_901)],
        f"{CHANGELIST}?status=failed": [run_id_of(4)],
        f"{CHANGELIST}?function=scale.beta": [run_id_of(1)],
        f"{CHANGELIST}?tenant={TENANT}": [run_id_of(10)],
        f"{CHANGELIST}?tenant=none&status=waiting": [run_id_of(8)],
        f"{CHANGELIST}?q=order-{tenant_key}": [run_id_of(tenant_key)],
        f"{CHANGELIST}?q=order-{untagged_key}": [run_id_of(untagged_key)],
        f"{CHANGELIST}?q=batch-{batch_key}": [run_id_of(batch_key)],
        f"{CHANGELIST}?q={run_id_of(123_456)}": [run_id_of(123_456)],
    }
    for url, expected_ids in pages.items():
        response, queries = page_queries(admin_client, url, django_assert_max_num_queries)
        html = response.content.decode()
        for run_id in expected_ids:
            assert run_id in html, (url, run_id)
        # Django's paginator count (and the full-result count) would read all million rows.
        assert not [q for q in queries if 'COUNT(*) AS "__count"' in q], url
        for query in queries:
            if "durable_run" in query and query.lstrip().upper().startswith(("SELECT", "WITH")):
                read = rows_read_from_runs(analyze(query))
                assert read <= MAX_ROWS_READ, (url, read, query)
        plan = analyze(listing_query(queries))
        # A search's few matches may be sorted; the table, or a filter's share of it, never is.
        sorted_rows = [
            node["Plans"][0]["Actual Rows"] for node in nodes(plan) if node["Node Type"] in ("Sort", "Incremental Sort")
        ]
        assert all(rows <= MAX_SORTED_ROWS for rows in sorted_rows), (url, sorted_rows)
        if "?" not in url or url.endswith("?p=2"):
            assert "durable_run_listing" in json.dumps(plan), plan

    # The counts are PostgreSQL's estimate, shown as such, and the pages stop at the paginator's cap.
    response = admin_client.get(CHANGELIST)
    paginator = response.context["cl"].paginator
    assert paginator.estimated and 0.5 * ROWS < paginator.count < 2 * ROWS
    assert paginator.num_pages == paginator.max_pages
    assert "the count is PostgreSQL's estimate" in response.content.decode()
    assert admin_client.get(f"{CHANGELIST}?p={paginator.max_pages + 1}").status_code == 302

    # The overview matches exact counts (the test's transaction fixes now()).
    summary = overview_store.overview()
    with connection.cursor() as cur:
        cur.execute(
            "SELECT status, count(*) FROM durable_run WHERE created_at >= now() - interval '1 hour' GROUP BY status"
        )
        exact_hour = dict(cur.fetchall())
        cur.execute("SELECT count(*) FROM durable_run WHERE created_at >= now() - interval '1 day'")
        exact_day = cur.fetchone()[0]
    assert summary.last_hour.by_status == exact_hour and not summary.last_hour.capped
    assert summary.last_day.total == exact_day and not summary.last_day.capped
    assert summary.oldest_pending_run_id == run_id_of(999_996)
    assert summary.created_per_minute == sum(exact_hour.values()) / 60
    capped = overview_store.overview(cap=1_000)
    assert capped.last_day.capped and capped.last_day.total == 1_000 and capped.last_hour.capped


def test_health_the_runs_gauge_and_the_workers_page_stay_bounded_on_a_million_runs(
    million_runs, admin_client, django_assert_max_num_queries
):
    from durable_django.api import operations
    from durable_django.engine import lifecycle
    from durable_django.store import health as health_store

    with connection.cursor() as cur:
        cur.execute(
            "INSERT INTO durable_worker (worker_id, host, pid, functions, concurrency) VALUES "
            "('host-a:1:aaaaaa', 'host-a', 1, '{\"scale.alpha\": [1]}', 8), "
            "('host-b:2:bbbbbb', 'host-b', 2, '{\"scale.alpha\": [1], \"scale.beta\": [1, 2]}', 8)"
        )
    waiting = ROWS // 10
    with django_assert_max_num_queries(11), CaptureQueriesContext(connection) as captured:
        started = time.monotonic()
        results = operations.health(max_oldest_pending=60)
        elapsed = time.monotonic() - started
    expected = [
        "OK database: 'default' answers (PostgreSQL ",
        "OK migrations: all durable_django migrations are applied",
        "OK workers: 2 live, the latest seen ",  # "0s ago (host-a pid 1)", or a second more on a loaded machine
        f"FAIL oldest-pending: run {run_id_of(999_996)} (scale.alpha v1) has waited ",
        "OK stranded: no run is stranded",
        "FAIL versions: due runs no live worker can run: scale.gamma v1 (no live worker registers it)",
        "OK parked: 0",
        "OK paused: nothing is paused",
    ]
    assert len(results) == len(expected)
    mismatched = [(str(result), prefix) for result, prefix in zip(results, expected, strict=True)]
    assert [pair for pair in mismatched if not pair[0].startswith(pair[1])] == []
    # Run 999,996 is the oldest pending run, due since it was created 999,996 x 2 seconds before the build.
    waited = int(str(results[3]).split("has waited ")[1].split("s ")[0])
    assert 999_996 * 2 <= waited < 999_996 * 2 + 600, results[3]
    # No statement reads the finished runs (70% of the table); only the stranded waits' reads every waiting run.
    for query in captured.captured_queries:
        if "durable_run" in query["sql"]:
            read = rows_read_from_runs(analyze(query["sql"]))
            assert read <= (waiting if "w.waiting_for" in query["sql"] else health_store.EXACT_UP_TO), (read, query)
    assert elapsed < 5, elapsed  # about 0.3s here

    with django_assert_max_num_queries(4), CaptureQueriesContext(connection) as captured:
        counts = lifecycle.runs_by_status_and_queue()
    for query in captured.captured_queries:
        assert rows_read_from_runs(analyze(query["sql"])) <= health_store.EXACT_UP_TO + 1, query
    # Each status holds more runs than are counted exactly: all are PostgreSQL's estimates, within a few percent.
    exact = {"succeeded": 500_000, "failed": 100_000, "cancelled": 100_000, "pending": 100_000, "running": 100_000}
    for status, count in {**exact, "waiting": 100_000}.items():
        assert 0.9 * count < counts[(status, "default")] < 1.1 * count, (status, counts)

    response, queries = page_queries(admin_client, "/admin/durable_django/worker/", django_assert_max_num_queries)
    html = response.content.decode()
    assert html.count(">live</span>") == 2
    assert '<li class="durable-expired"><code>scale.gamma</code> v1' in html
    for query in queries:
        if "durable_run" in query and query.lstrip().upper().startswith(("SELECT", "WITH")):
            assert rows_read_from_runs(analyze(query)) <= waiting, query
