"""A claim may leave out its expired-lease arm, which a pinned xmin horizon makes walk every dead entry."""

import psycopg
import pytest
from psycopg import sql as sql_text

from durable_django import api
from durable_django.engine import lifecycle
from durable_django.store import flow
from tests.helpers import sql, subprocess_database_url
from tests.store.factories import complete

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "direct"])

BOUNDS = lifecycle.claim_bounds(functions=None, queues=None, tenant_id=None)


def claim(*, recover, lease_seconds=30.0):
    return lifecycle.claim(
        limit=10, start_now=10, worker_id="w", bounds=BOUNDS, lease_seconds=lease_seconds, recover=recover
    )


def test_a_claim_without_recovery_leaves_a_run_whose_lease_ran_out_and_one_with_it_takes_it():
    api.enqueue("tests.noop", {})
    [held] = claim(recover=True)
    sql("UPDATE durable_run SET leased_until = now() - interval '1 second'")
    assert claim(recover=False) == []
    [taken] = claim(recover=True)
    assert (taken.run.run_id, taken.token) == (held.run.run_id, held.token + 1)


def claim_plan(*, recover, generic):
    """The claim's plan, run (EXPLAIN ANALYZE): with its parameters known (``generic`` False), or as a worker's
    prepared statement runs once PostgreSQL plans it for any parameters."""
    params = {
        **BOUNDS.params,
        **flow.admission_params(),
        "limit": 10,
        "start_now": 10,
        "lease": 30,
        "worker_id": "x",
        "recover": recover,
    }
    statement = BOUNDS.claim_statement
    # On the direct alias: behind a transaction pooler a prepared statement would outlive this session.
    with psycopg.connect(subprocess_database_url("direct"), autocommit=True) as conn:
        conn.execute("SET plan_cache_mode = " + ("force_generic_plan" if generic else "force_custom_plan"))
        # Prepared, as the worker's statement is: only then may PostgreSQL plan it for any parameters.
        conn.execute("PREPARE claim AS " + statement.positional)
        values = sql_text.SQL(", ").join(sql_text.Literal(value) for value in statement.values(params))
        [[explained]] = conn.execute(
            sql_text.SQL("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE claim ({})").format(values)
        ).fetchall()
    return explained[0]["Plan"]


def test_while_the_xmin_horizon_is_pinned_a_claim_without_recovery_reads_none_of_the_dead_lease_entries():
    holder = psycopg.connect(subprocess_database_url(), autocommit=False)
    try:
        holder.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        holder.execute("SELECT 1")  # its snapshot pins the horizon until it ends
        api.enqueue_many("tests.noop", [{"n": index} for index in range(1000)])
        # Claimed with a lease that runs out at once, then landed: each left a dead entry in the leases
        # index, at a lease that has run out, which nothing may remove while the holder's snapshot lives.
        while batch := claim(recover=False, lease_seconds=0.001):
            for attempt in batch:
                assert complete(attempt.run, "null") == "succeeded"
        with_plan = claim_plan(recover=True, generic=False)
        plans = {generic: claim_plan(recover=False, generic=generic) for generic in (False, True)}
    finally:
        holder.close()
    # With the arm, its scan walks the dead entries (to find nothing: every run has landed) and the heap rows
    # they point to, whichever way the planner reads them.
    assert [node["Actual Loops"] for node in expired_arm(with_plan)] == [1], with_plan
    assert blocks(with_plan) - blocks(plans[False]) >= 30, (blocks(with_plan), blocks(plans[False]))
    # Without it the scan never runs: planned away with the parameter known, under a one-time filter in a
    # generic plan.
    assert expired_arm(plans[False]) == []
    generic = expired_arm(plans[True])
    assert generic and all(node["Actual Loops"] == 0 for node in generic), generic


def expired_arm(plan):
    """The plan's topmost nodes that read the runs whose lease ran out (an index scan, a bitmap heap scan
    over its index's, or a sequential scan: how the planner reads them depends on its statistics)."""
    conditions = " ".join(plan.get(key, "") for key in ("Index Cond", "Recheck Cond", "Filter"))
    if plan.get("Relation Name") == "durable_run" and "leased_until < now()" in conditions:
        return [plan]
    return [node for child in plan.get("Plans", []) for node in expired_arm(child)]


def blocks(plan):
    """The buffers a plan's run touched (a node's count holds its children's)."""
    return plan["Shared Hit Blocks"] + plan["Shared Read Blocks"]
