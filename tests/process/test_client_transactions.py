"""A client transaction of any length that touches a running run takes no lease from its live holder.

Each client call runs in a real transaction, in a thread, held open for two and a half leases while a real
worker executes the run's one step; the step must run once and the attempt keep its lease.
"""

import threading
import time

import pytest
from django.db import connection, transaction

from durable_django import api
from tests.helpers import sql, wait_until
from tests.workflows import effects

pytestmark = [pytest.mark.process, pytest.mark.django_db(transaction=True)]

LEASE = 2.0
# Longer than a lease, shorter than the step (and than the reconciler's three leases of grace).
HOLD = 2.5 * LEASE


def child_of(parent_run_id, *, status, queue="default"):
    """A child of ``parent_run_id`` in ``status`` (a run no worker here serves, in queue "nobody")."""
    child = api.enqueue("tests.noop", {}, queue=queue)
    sql(
        "UPDATE durable_run SET parent_run_id = %s, status = %s, finished_at = CASE WHEN %s = 'failed' THEN now() END,"
        " error = CASE WHEN %s = 'failed' THEN 'failed before' END WHERE run_id = %s",
        [parent_run_id, status, status, status, child.run_id],
    )
    sql("UPDATE durable_run SET has_children = true WHERE run_id = %s", [parent_run_id])
    return child.run_id


def locking_read(run_id):
    with connection.cursor() as cur:
        cur.execute("SELECT status FROM durable_run WHERE run_id = %s FOR UPDATE", [run_id])


CALLS = {
    "emit_signal": lambda run_id, child: api.emit_signal(run_id, "ping", {"from": "a slow view"}),
    "cancel": lambda run_id, child: api.cancel(run_id),
    "cancel_a_child": lambda run_id, child: api.cancel(child["pending"]),
    "resume_a_child": lambda run_id, child: api.resume(child["failed"]),
    "locking_read": lambda run_id, child: locking_read(run_id),
}


@pytest.mark.parametrize("call", sorted(CALLS))
def test_a_client_transaction_longer_than_a_lease_takes_no_lease_from_a_live_holder(workers, call):
    run = api.enqueue("tests.long_step", {"seconds": HOLD + 3 * LEASE})
    children = {
        "pending": child_of(run.run_id, status="pending", queue="nobody"),
        "failed": child_of(run.run_id, status="failed"),
    }
    # Idle slots wake at every lease's end, as a dead worker's run would have them.
    workers.start("--concurrency", "3", DURABLE_TEST_LEASE_SECONDS=str(LEASE))
    wait_until(lambda: effects.count("long-step") == 1, timeout=60, message="the step to start")
    outcome = {}

    def slow_view():
        try:
            with transaction.atomic():
                CALLS[call](run.run_id, children)
                time.sleep(HOLD)
                # The row is locked here, so its lease has run out: the holder renewed it beside the row.
                # (now() is when this transaction began: the clock is read as it is now.)
                outcome["lease"] = sql(
                    "SELECT r.leased_until > clock_timestamp(), EXISTS (SELECT 1 FROM durable_lease_renewal k"
                    " WHERE k.run_id = r.run_id AND k.token = r.attempts AND k.leased_until > clock_timestamp())"
                    " FROM durable_run r WHERE r.run_id = %s",
                    [run.run_id],
                )
            outcome["committed"] = True
        finally:
            connection.close()

    view = threading.Thread(target=slow_view)
    view.start()
    view.join(timeout=60)
    assert outcome.get("committed"), outcome
    assert outcome["lease"] == [(False, True)]
    wait_until(
        lambda: api.get_run(run.run_id).status in ("succeeded", "cancelled"), timeout=60, message="the run to end"
    )
    ended = api.get_run(run.run_id)
    assert (ended.attempts, ended.recoveries) == (1, 0), ended
    assert ended.status == ("cancelled" if call == "cancel" else "succeeded")
    assert effects.count("long-step") == 1
