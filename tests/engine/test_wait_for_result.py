import threading
import time
import uuid

import pytest

from durable_django import api
from durable_django.exceptions import RunNotFound
from durable_django.testing import run_until_idle
from tests.helpers import other_sessions, sql, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


# A session of the caller's that subscribed and read: idle, its last statement past its LISTEN.
SUBSCRIBED_AND_READ = (
    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() "
    "AND NOT pid = ANY(%s) AND state = 'idle' AND query NOT LIKE 'LISTEN %%'"
)


def test_wait_for_result_returns_when_the_run_lands():
    run = api.enqueue("tests.noop", {"v": 3})
    before = list(other_sessions())

    def finish_once_the_caller_waits():
        # The caller LISTENs on a session of its own, reads the run (pending), then waits: land it then.
        wait_until(lambda: sql(SUBSCRIBED_AND_READ, [before])[0][0], message="the caller to wait")
        run_until_idle()
        from django.db import connections

        connections.close_all()

    threading.Thread(target=finish_once_the_caller_waits).start()
    started = time.monotonic()
    done = api.wait_for_result(run.run_id, timeout=30)
    assert (done.status, done.output) == ("succeeded", {"v": 3})
    assert time.monotonic() - started < 5  # woken by NOTIFY, not by the 5s fallback read


def test_wait_for_result_times_out_and_refuses_unknown_or_foreign_runs():
    run = api.enqueue("tests.noop", {}, tenant_id=uuid.uuid4())
    with pytest.raises(TimeoutError):
        api.wait_for_result(run.run_id, timeout=0.2)
    with pytest.raises(RunNotFound):
        api.wait_for_result(run.run_id, timeout=0.2, tenant_id=uuid.uuid4())
    with pytest.raises(RunNotFound):
        api.wait_for_result(str(uuid.uuid4()), timeout=0.2)


def test_wait_for_result_returns_a_finished_run_at_once():
    run = api.enqueue("tests.noop", {})
    run_until_idle()
    assert api.wait_for_result(run.run_id, timeout=1).status == "succeeded"


def test_waiting_inside_the_transaction_that_enqueued_the_run_is_refused_with_the_reason():
    from django.db import transaction

    from durable_django.exceptions import InvalidInput

    with transaction.atomic():
        run = api.enqueue("tests.noop", {})
        with pytest.raises(InvalidInput, match="enqueued in this transaction, which has not committed"):
            api.wait_for_result(run.run_id)  # without a timeout it would wait forever


def test_waiting_inside_a_transaction_for_a_run_committed_before_it_works():
    from django.db import transaction

    run = api.enqueue("tests.noop", {"v": 1})
    run_until_idle()
    with transaction.atomic():
        assert api.wait_for_result(run.run_id, timeout=5).output == {"v": 1}
