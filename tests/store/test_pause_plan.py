"""A paused claim costs nothing: the runs a pause holds are out of the claim index, and no claim reads them."""

import pytest

from durable_django import api
from tests.helpers import sql
from tests.store.test_schema import claim_plan, rows_read

pytestmark = pytest.mark.django_db(transaction=True)

PAUSED_BACKLOG = """
    INSERT INTO durable_run (run_id, name, version, status, input, retry_policy, priority, created_at, updated_at)
    SELECT 'paused-' || g, 'tests.slow', 1, 'pending', '{}', '{}', 5,
           now() - interval '1 hour' - make_interval(secs => g), now()
    FROM generate_series(1, 20000) g
"""
SERVED = """
    INSERT INTO durable_run (run_id, name, version, status, input, retry_policy, created_at, updated_at)
    SELECT 'served-' || g, 'tests.noop', 1, 'pending', '{}', '{}', now() - make_interval(secs => g), now()
    FROM generate_series(1, 100) g
"""


def hold_function_calls(nodes):
    """How often the claim called durable_hold_paused."""
    return sum(node["Actual Loops"] for node in nodes if node.get("Function Name") == "durable_hold_paused")


def test_a_claim_reads_none_of_the_runs_a_paused_function_holds():
    sql(PAUSED_BACKLOG)
    sql(SERVED)
    api.pause(function="tests.slow")  # holds the backlog at once, older and ranked higher than what is served
    nodes = claim_plan()
    assert rows_read(nodes) <= 100, [(node["Node Type"], node.get("Index Name"), node["Actual Rows"]) for node in nodes]
    assert hold_function_calls(nodes) == 0
    assert sql("SELECT count(*) FROM durable_run WHERE status = 'running'") == [(10,)]
    assert sql("SELECT count(*) FROM durable_run WHERE held_by = 'paused:function:tests.slow'") == [(20000,)]


def test_a_run_arriving_under_a_pause_is_read_once_by_the_claim_that_holds_it_then_never_again():
    sql(PAUSED_BACKLOG)
    api.pause(function="tests.slow")
    sql(SERVED)
    late = api.enqueue("tests.slow", {"late": True}, priority=10)
    nodes = claim_plan()
    assert hold_function_calls(nodes) == 1
    assert api.get_run(late.run_id).held_by == "paused:function:tests.slow"
    nodes = claim_plan()
    assert hold_function_calls(nodes) == 0 and rows_read(nodes) <= 100
    assert sql("SELECT count(*) FROM durable_run WHERE status = 'running'") == [(19,)]
