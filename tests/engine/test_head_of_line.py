"""No head-of-line blocking: a due run a limit keeps back never stops a claim from taking other work.

Every kind of due run (pending, a sleeper whose sleep ended, a waiter whose wait timed out, a run whose
holder's lease expired) behind every kind of full limit (a concurrency key, a rate key) must leave the
claim's candidates, so unlimited runs queued behind them are claimed by the next claim or the one after.
"""

import pytest

from durable_django import api
from durable_django.testing import claim
from tests.helpers import sql
from tests.store.factories import complete

pytestmark = pytest.mark.django_db(transaction=True)

# More blocked runs than a claim looks at, all older than the unlimited runs behind them.
BLOCKED = 4
SLOTS = 3

# Each kind of due run, made from a pending run (it had started before: its sleep, wait or attempt began).
DUE_KINDS = {
    "pending": None,
    "woken_sleeper": "status = 'waiting', waiting_for = 'sleep', available_at = now() - interval '1 second'",
    "woken_waiter": "status = 'waiting', waiting_for = 'signal:ping:0', available_at = now() - interval '1 second'",
    "recovered": "status = 'running', leased_until = now() - interval '1 second', attempt_started_at = now() - "
    "interval '31 seconds', claimed_at = now() - interval '31 seconds', worker_id = 'a dead worker'",
}


def fill(limit):
    """Take a limit's last room: the key's one slot, or the rate's starts in its window (an hour)."""
    if limit == "concurrency":
        api.enqueue("tests.limited", {"key": "k", "holder": True})
        return claim(limit=1)
    api.enqueue_many("tests.rated_hourly", [{"holder": n} for n in range(2)])
    holders = claim(limit=10)
    assert len(holders) == 2
    return holders


def blocked_run(limit, n):
    if limit == "concurrency":
        return api.enqueue("tests.limited", {"key": "k", "n": n})
    return api.enqueue("tests.rated_hourly", {"n": n})


@pytest.mark.parametrize("limit", ["concurrency", "rate"])
@pytest.mark.parametrize("kind", sorted(DUE_KINDS))
def test_due_runs_a_full_limit_keeps_back_never_block_other_runs(kind, limit):
    holders = fill(limit)
    blocked = [blocked_run(limit, n) for n in range(BLOCKED)]
    if DUE_KINDS[kind]:
        sql(
            f"UPDATE durable_run SET {DUE_KINDS[kind]}, attempts = 1, started_at = now() - interval '1 minute'"
            " WHERE run_id = ANY(%s)",
            [[run.run_id for run in blocked]],
        )
    free = [api.enqueue("tests.noop", {"n": n}) for n in range(SLOTS)]
    claimed = []
    for _ in range(3):  # the first claim may spend itself keeping the blocked runs back
        claimed += [run.run_id for run in claim(limit=SLOTS)]
    assert {run.run_id for run in free} <= set(claimed), (kind, limit)
    # The blocked runs are kept back for their limit (a recovered run may hold its slot, never a rate start).
    if not (kind == "recovered" and limit == "concurrency"):
        assert not {run.run_id for run in blocked} & set(claimed)
        rows = sql(
            "SELECT status, held_by IS NOT NULL FROM durable_run WHERE run_id = ANY(%s)", [[b.run_id for b in blocked]]
        )
        assert all(status in ("pending", "running") for status, _ in rows), rows
    for run in free + holders:
        current = api.get_run(run.run_id)
        if current.status == "running":
            complete(current, '"done"')
