import re
import warnings

import pytest
from django.core import checks
from django.test import override_settings

from tests.helpers import sql

pytestmark = pytest.mark.django_db(transaction=True)

# The seed's recommended indexes (and keys), as definitions, whatever Django names them.
SEED_DEFINITIONS = {
    "durable_run": {
        "UNIQUE (run_id)",
        # The seed's unique key, narrowed to the runs that have one (NULLs never conflict): the same rule,
        # and no index entry for the runs without a key at each of their writes (migration 0024).
        "UNIQUE (idempotency_key) WHERE (idempotency_key IS NOT NULL)",
        "UNIQUE (coalesce_key) WHERE ((attempts = 0) AND (status = 'pending'::text))",
        "(status, name, created_at)",
        "(tenant_id, status, name, created_at)",
        "(status, updated_at)",
        # The seed's listing indexes, ascending (read backward for newest first), the first carrying each
        # run's status for the overview's index-only count.
        "(created_at, run_id) INCLUDE (status)",
        "(tenant_id, created_at, run_id)",
    },
    "durable_step": {"UNIQUE (run_id, step_id)"},
    "durable_rate_start": set(),
    "durable_attempt": set(),
    "durable_schedule": {
        "UNIQUE (schedule_id)",
        "(next_fire_at) WHERE enabled",
        "(tenant_id, next_fire_at) WHERE enabled",
    },
}
# What the claim's own order, the cascades, the reconciler and the health check add beyond the seed.
OWN_DEFINITIONS = {
    "durable_run": {
        "(priority DESC, created_at) WHERE ((held_by IS NULL) AND (status = 'pending'::text))",
        "(queue, priority DESC, created_at) WHERE ((held_by IS NULL) AND (status = 'pending'::text))",
        "(tenant_id, priority DESC, created_at) WHERE ((held_by IS NULL) AND (status = 'pending'::text) "
        "AND (tenant_id IS NOT NULL))",
        "(held_by, priority DESC, created_at) WHERE ((held_by IS NOT NULL) AND (status = 'pending'::text))",
        "(concurrency_key, priority DESC, created_at) WHERE ((concurrency_key IS NOT NULL) AND (held_by IS NULL) "
        "AND (status = 'pending'::text))",
        "(rate_key, priority DESC, created_at) WHERE ((held_by IS NULL) AND (rate_key IS NOT NULL) "
        "AND (status = 'pending'::text))",
        "(concurrency_key) WHERE ((concurrency_key IS NOT NULL) AND ((status = 'running'::text) OR "
        "(concurrency_while_waiting AND (started_at IS NOT NULL) AND (status = ANY (ARRAY['pending'::text, "
        "'waiting'::text])))))",
        "UNIQUE (debounce_key) WHERE ((attempts = 0) AND (status = 'pending'::text))",
        "(available_at) WHERE (status = 'waiting'::text)",
        "(leased_until) WHERE (status = 'running'::text)",
        "(deadline) WHERE ((deadline IS NOT NULL) AND (status = ANY (ARRAY['pending'::text, 'running'::text, "
        "'waiting'::text])))",
        "(parent_run_id, run_id) WHERE (parent_run_id IS NOT NULL)",
        "(run_id) WHERE (status = 'waiting'::text)",
        "(available_at) WHERE ((available_at IS NOT NULL) AND (status = 'pending'::text))",
        "(coalesce_key) WHERE (coalesce_key IS NOT NULL)",
        "(name, version, available_at, updated_at) WHERE (status = 'pending'::text)",
        "(status, created_at, run_id)",
        # The admin's function filter, in listing order.
        "(name, created_at, run_id)",
        "(parked_at) WHERE ((parked_at IS NOT NULL) AND (status = 'waiting'::text))",
        # Search by input (migration 0020).
        "CREATE INDEX durable_run_input ON public.durable_run USING gin (input jsonb_path_ops)",
    },
    "durable_step": set(),
    # The buffer_one policy's waiting ticks, for the due claim.
    "durable_schedule": {"(buffered_tick) WHERE ((buffered_tick IS NOT NULL) AND enabled)"},
    # Every attempt of a run, written by the trigger that ends it (migration 0017), read by run.
    "durable_attempt": {"UNIQUE (run_id, number)"},
    "durable_rate_start": {"UNIQUE (id)", "(key, started_at)", "(expires_at)"},
}


def index_definitions(table):
    rows = sql("SELECT indexdef FROM pg_indexes WHERE tablename = %s", [table])
    definitions = set()
    for (indexdef,) in rows:
        unique = "UNIQUE " if indexdef.startswith("CREATE UNIQUE") else ""
        body = re.sub(r"^.* USING btree ", "", indexdef)
        definitions.add(unique + body)
    return definitions


@pytest.mark.parametrize("table", sorted(SEED_DEFINITIONS))
def test_indexes_match_the_seed_definitions_and_nothing_else(table):
    assert index_definitions(table) == SEED_DEFINITIONS[table] | OWN_DEFINITIONS[table]


def test_the_run_and_journal_tables_carry_their_vacuum_settings():
    # Migration 0008: the run table is vacuumed early and always with its indexes (docs/guide.md, "Large tables").
    options = dict(sql("SELECT relname, reloptions FROM pg_class WHERE relname IN ('durable_run', 'durable_step')"))
    assert set(options["durable_run"]) == {
        "autovacuum_vacuum_scale_factor=0.002",
        "autovacuum_vacuum_threshold=1000",
        "vacuum_index_cleanup=on",
        "autovacuum_vacuum_insert_scale_factor=0.002",
        "autovacuum_vacuum_insert_threshold=1000",
        "autovacuum_analyze_scale_factor=0.01",
    }
    assert options["durable_step"] == ["autovacuum_vacuum_scale_factor=0.01"]


def test_no_like_pattern_indexes_on_text_keys():
    assert (
        sql("SELECT indexname FROM pg_indexes WHERE tablename LIKE 'durable_%%' AND indexdef LIKE '%%pattern_ops%%'")
        == []
    )


def test_column_types_follow_the_seed():
    rows = dict(sql("SELECT column_name, data_type FROM information_schema.columns WHERE table_name = 'durable_run'"))
    expected = {
        "run_id": "text",
        "name": "text",
        "status": "text",
        "idempotency_key": "text",
        "coalesce_key": "text",
        "input": "jsonb",
        "output": "jsonb",
        "error": "text",
        "tenant_id": "uuid",
        "attempts": "integer",
        "leased_until": "timestamp with time zone",
        "available_at": "timestamp with time zone",
        "created_at": "timestamp with time zone",
        "updated_at": "timestamp with time zone",
        "cancel_requested_at": "timestamp with time zone",
        "cancel_refused_at": "timestamp with time zone",
    }
    assert {column: rows[column] for column in expected} == expected
    assert sql(
        "SELECT column_default FROM information_schema.columns "
        "WHERE table_name = 'durable_run' AND column_name = 'attempts'"
    ) == [("0",)]


def claim_query(**worker_options):
    """A worker's claim of ten runs, as (statement, parameters), after ANALYZE."""
    from durable_django.store import flow
    from durable_django.worker.loop import WorkerOptions

    sql("ANALYZE durable_run")
    bounds = WorkerOptions(**worker_options).claim_bounds()
    params = {**bounds.params, **flow.admission_params(), "limit": 10, "start_now": 10, "lease": 30, "worker_id": "x"}
    params["recover"] = True
    return bounds.claim_statement.named, params


def explain_claim(*, analyze: bool) -> str:
    """The plan of a worker's claim on the current data."""
    query, params = claim_query()
    return "\n".join(row[0] for row in sql(("EXPLAIN ANALYZE " if analyze else "EXPLAIN ") + query, params))


def test_claim_on_100k_finished_runs_uses_indexes_not_a_sequential_scan():
    sql("""
        INSERT INTO durable_run (run_id, name, version, status, input, output, retry_policy, created_at,
                                 updated_at, finished_at)
        SELECT 'done-' || g, 'tests.noop', 1, 'succeeded', '{}', 'null', '{}',
               now() - make_interval(secs => g), now() - make_interval(secs => g), now()
        FROM generate_series(1, 100000) g
    """)
    plan = explain_claim(analyze=False)
    # (The pauses, a handful of rows at most, are read whole, once per statement.)
    assert "Seq Scan on durable_run" not in plan, plan
    # Pending runs are read in claim order from the partial index, with no sort.
    assert "Index Scan using durable_run_claim_pending" in plan, plan


def test_claim_reads_20k_pending_runs_in_index_order_instead_of_sorting_them():
    sql("""
        INSERT INTO durable_run (run_id, name, version, status, input, retry_policy, created_at, updated_at)
        SELECT 'pending-' || g, CASE WHEN g %% 2 = 0 THEN 'tests.noop' ELSE 'tests.slow' END, 1, 'pending', '{}',
               '{}', now() - make_interval(secs => g), now()
        FROM generate_series(1, 20000) g
    """)
    plan = explain_claim(analyze=True)
    pending_arm = plan.split("CTE due_waits")[0]
    assert "Index Scan using durable_run_claim_pending" in pending_arm, plan
    assert "Sort" not in pending_arm and "Bitmap" not in pending_arm, plan


def test_system_check_fails_on_a_database_that_is_not_postgresql():
    from durable_django.checks import check_database

    sqlite = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}}
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Overriding setting DATABASES")
        with override_settings(DATABASES=sqlite):
            errors = check_database()
    assert [error.id for error in errors] == ["durable_django.E001"]
    assert "PostgreSQL" in errors[0].msg
    assert check_database() == []
    assert all(error.id != "durable_django.E001" for error in checks.run_checks())


def plan_nodes(plan):
    """Every node of a JSON plan, depth first."""
    yield plan
    for child in plan.get("Plans", []):
        yield from plan_nodes(child)


def rows_read(nodes):
    """The most rows any node of an analyzed plan read (returned plus filtered out)."""
    return max(node["Actual Rows"] * node["Actual Loops"] + node.get("Rows Removed by Filter", 0) for node in nodes)


def claim_plan(**worker_options):
    """The analyzed plan's nodes of a worker's claim of ten (it claims, as the worker's claim does)."""
    query, params = claim_query(**worker_options)
    [(plan,)] = sql("EXPLAIN (ANALYZE, FORMAT JSON) " + query, params)
    return list(plan_nodes(plan[0]["Plan"]))


def test_an_idle_workers_next_due_reads_one_run_however_many_a_rate_limit_holds():
    from durable_django.worker.loop import WorkerOptions

    sql("""
        INSERT INTO durable_run (run_id, name, version, status, input, retry_policy, rate_key, rate_limit,
                                 rate_per, created_at, updated_at)
        SELECT 'rated-' || g, 'tests.rated', 1, 'pending', '{}', '{}', 'rate:tests.rated', 5, 1.0,
               now() + make_interval(secs => g / 1e6), now()
        FROM generate_series(1, 30000) g
    """)
    sql("ANALYZE durable_run")  # statistics from before the holds, as when a backlog meets a full window
    sql("""
        UPDATE durable_run SET held_by = rate_key, available_at = now() + make_interval(secs => created_at_order / 5.0)
        FROM (SELECT run_id AS id, row_number() OVER (ORDER BY created_at) AS created_at_order FROM durable_run) o
        WHERE run_id = o.id AND created_at_order <= 20000
    """)
    bounds = WorkerOptions().claim_bounds()
    [(plan,)] = sql("EXPLAIN (ANALYZE, FORMAT JSON) " + bounds.next_due_sql, bounds.params)
    assert rows_read(plan_nodes(plan[0]["Plan"])) <= 1, plan


def claimed_queues():
    return dict(sql("SELECT queue, count(*) FROM durable_run WHERE status = 'running' GROUP BY queue"))


# The backlog of a queue or tenant no bound worker serves is older and ranks higher than the runs it serves.
BACKLOG = """
    INSERT INTO durable_run (run_id, name, version, status, input, retry_policy, queue, priority, tenant_id,
                             created_at, updated_at)
    SELECT 'backlog-' || g, 'tests.noop', 1, 'pending', '{}', '{}', 'bulk', 5,
           'aaaaaaaa-aaaa-aaaa-aaaa-aaaaaaaaaaaa', now() - interval '1 hour' - make_interval(secs => g), now()
    FROM generate_series(1, 100000) g
"""
SERVED = """
    INSERT INTO durable_run (run_id, name, version, status, input, retry_policy, queue, priority, tenant_id,
                             created_at, updated_at)
    SELECT %(queue)s || '-' || g, 'tests.noop', 1, 'pending', '{}', '{}', %(queue)s, g %% 3, %(tenant)s::uuid,
           now() - make_interval(secs => g), now()
    FROM generate_series(1, %(runs)s) g
"""
SERVED_TENANT = "bbbbbbbb-bbbb-bbbb-bbbb-bbbbbbbbbbbb"


@pytest.mark.parametrize("queues", [["default"], ["default", "mail"]])
def test_a_worker_bound_to_queues_never_reads_another_queues_backlog(queues):
    sql(BACKLOG)
    # Its own queues have a backlog too: the claim must not read all of it to sort it.
    for queue in ("default", "mail"):
        sql(SERVED, {"queue": queue, "tenant": SERVED_TENANT, "runs": 5_000})
    nodes = claim_plan(queues=queues)
    assert rows_read(nodes) <= 100, [(node["Node Type"], node.get("Index Name"), node["Actual Rows"]) for node in nodes]
    # It claimed the ten first of its queues in claim order (priority, then age), whichever queue they are in.
    expected = sql(
        "SELECT run_id FROM durable_run WHERE queue = ANY(%s) ORDER BY priority DESC, created_at LIMIT 10", [queues]
    )
    assert sql("SELECT run_id FROM durable_run WHERE status = 'running' ORDER BY run_id") == sorted(expected)


def test_a_worker_bound_to_a_tenant_never_reads_another_tenants_backlog():
    sql(BACKLOG.replace("'bulk'", "'default'"))
    # Its own backlog is large too: the claim must not read all of it to sort it.
    sql(SERVED, {"queue": "default", "tenant": SERVED_TENANT, "runs": 5_000})
    nodes = claim_plan(tenant_id=SERVED_TENANT)
    assert rows_read(nodes) <= 100, [(node["Node Type"], node.get("Index Name"), node["Actual Rows"]) for node in nodes]
    assert sql("SELECT count(*) FROM durable_run WHERE status = 'running' AND tenant_id = %s", [SERVED_TENANT]) == [
        (10,)
    ]


def test_claim_never_reads_the_100k_runs_a_saturated_key_holds():
    sql("""
        INSERT INTO durable_run (run_id, name, version, status, input, retry_policy, queue, priority,
                                 concurrency_key, concurrency_limit, held_by, created_at, updated_at)
        SELECT 'held-' || g, 'tests.limited', 1, 'pending', '{}', '{}', 'default', 0,
               'concurrency:tests.limited:hot', 1, 'concurrency:tests.limited:hot',
               now() - interval '1 hour' - make_interval(secs => g), now()
        FROM generate_series(1, 100000) g
    """)
    sql("""
        INSERT INTO durable_run (run_id, name, version, status, input, retry_policy, created_at, updated_at)
        SELECT 'free-' || g, 'tests.noop', 1, 'pending', '{}', '{}', now(), now() FROM generate_series(1, 20) g
    """)
    nodes = claim_plan()
    assert not [node for node in nodes if node["Node Type"] == "Seq Scan" and node["Relation Name"] == "durable_run"]
    assert any(node.get("Index Name") == "durable_run_claim_pending" for node in nodes)
    # No node of the plan reads more than a handful of rows: the held runs are outside the claim index.
    assert rows_read(nodes) <= 100, [(node["Node Type"], node.get("Index Name"), node["Actual Rows"]) for node in nodes]
    assert sql("SELECT count(*) FROM durable_run WHERE status = 'running'") == [(10,)]
