"""Retention: purge deletes whole finished trees older than the cutoff, in batches, and nothing live."""

from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from durable_django import api
from durable_django.store import purge
from tests.helpers import ADVISORY_LOCKS_HERE, sql

pytestmark = pytest.mark.django_db(transaction=True)


def make_runs(prefix, count, *, statuses=("succeeded",), landed_ago=timedelta(days=2), steps=0, parent=None):
    """Insert ``count`` runs and ``steps`` journal entries each with one INSERT ... SELECT generate_series.

    Runs are named ``{prefix}{i}``, cycle through ``statuses`` and land one second apart,
    ``landed_ago`` before now for the newest.
    """
    sql(
        """
        WITH made AS (
            INSERT INTO durable_run (run_id, name, status, input, retry_policy, parent_run_id,
                                     created_at, updated_at, finished_at)
            SELECT %(prefix)s || i, 'tests.noop', (%(statuses)s::text[])[1 + i %% cardinality(%(statuses)s::text[])],
                   'null', '{}', %(parent)s,
                   now() - %(ago)s - make_interval(secs => i + 60), now() - %(ago)s - make_interval(secs => i),
                   CASE WHEN (%(statuses)s::text[])[1 + i %% cardinality(%(statuses)s::text[])]
                             IN ('succeeded', 'failed', 'cancelled')
                        THEN now() - %(ago)s - make_interval(secs => i) END
            FROM generate_series(1, %(count)s) i
            RETURNING run_id
        )
        INSERT INTO durable_step (run_id, step_id, result, created_at)
        SELECT run_id, 'v1:step:' || n, to_jsonb(n), now() FROM made, generate_series(1, %(steps)s) n
    """,
        {
            "prefix": prefix,
            "count": count,
            "statuses": list(statuses),
            "ago": landed_ago,
            "steps": steps,
            "parent": parent,
        },
    )


def ids(pattern):
    return {row[0] for row in sql("SELECT run_id FROM durable_run WHERE run_id LIKE %s", [pattern])}


def steps_of(pattern):
    return sql("SELECT count(*) FROM durable_step WHERE run_id LIKE %s", [pattern])[0][0]


@pytest.mark.strands  # live runs made by SQL under finished parents
def test_ten_thousand_finished_go_in_batches_and_a_hundred_live_keep_their_steps():
    make_runs("done-", 10_000, statuses=("succeeded", "failed", "cancelled"), steps=2)
    make_runs("live-", 100, statuses=("pending", "running", "waiting"), landed_ago=timedelta(days=3), steps=2)
    make_runs("recent-", 50, landed_ago=timedelta(hours=1), steps=1)
    # Trees: a finished old child of a live parent stays; so do a finished parent with a live child
    # and one whose child landed after the cutoff; an old finished parent goes with its old child.
    make_runs("kept-child-", 3, parent="live-3", steps=1)
    make_runs("live-child-parent-", 1, landed_ago=timedelta(days=5))
    make_runs("live-child-", 1, statuses=("waiting",), parent="live-child-parent-1")
    make_runs("recent-child-parent-", 1, landed_ago=timedelta(days=5))
    make_runs("recent-child-", 1, parent="recent-child-parent-1", landed_ago=timedelta(hours=2))
    make_runs("tree-root-", 1, landed_ago=timedelta(days=2))
    make_runs("tree-child-", 2, parent="tree-root-1", landed_ago=timedelta(days=2, hours=1), steps=3)
    make_runs("tree-grandchild-", 1, parent="tree-child-1", landed_ago=timedelta(days=2, hours=2))
    doomed = ids("done-%") | ids("tree-%")
    survivors = {row[0] for row in sql("SELECT run_id FROM durable_run")} - doomed
    assert len(doomed) == 10_004 and len(survivors) == 157

    cutoff = timezone.now() - timedelta(days=1)
    batches, position = [], None
    while True:
        deleted, position = purge.purge_batch(cutoff, 1000, position)
        batches.append(deleted)
        if position is None:
            break

    assert sum(batches) == len(doomed)
    assert 10 <= len([count for count in batches if count]) <= 12 and max(batches) <= 1000 + 3
    assert {row[0] for row in sql("SELECT run_id FROM durable_run")} == survivors
    assert steps_of("live-%") == 200 and steps_of("recent-%") == 50 and steps_of("kept-child-%") == 3
    assert steps_of("done-%") == 0 and steps_of("tree-%") == 0
    assert sql("SELECT count(*) FROM durable_step WHERE run_id NOT IN (SELECT run_id FROM durable_run)")[0][0] == 0


def test_purge_finished_returns_the_count_and_frees_keys():
    first = api.enqueue("tests.noop", {"v": 1}, idempotency_key="daily-report")
    sql("UPDATE durable_run SET status = 'succeeded', updated_at = now() - interval '40 days'")
    make_runs("old-", 2_500, landed_ago=timedelta(days=31), steps=1)
    make_runs("young-", 10, landed_ago=timedelta(days=29))
    assert api.purge_finished(older_than=timedelta(days=30), batch_size=400) == 2_501
    assert ids("%") == ids("young-%")
    again = api.enqueue("tests.noop", {"v": 2}, idempotency_key="daily-report")
    assert again.run_id != first.run_id and again.input == {"v": 2}


def test_durable_purge_command(capsys):
    make_runs("old-", 300, landed_ago=timedelta(days=31), steps=3)
    make_runs("live-", 5, statuses=("running",), landed_ago=timedelta(days=90), steps=3)
    call_command("durable_purge", "--older-than", "30d", "--batch-size", "64")
    assert capsys.readouterr().out.strip().endswith("purged 300 runs")
    assert ids("%") == ids("live-%") and steps_of("%") == 15


def test_a_purge_racing_a_resume_of_a_tree_leaves_that_whole_tree():
    """A resume holds the root of a finished tree while a purge runs: the purge leaves the whole tree."""
    import threading
    from datetime import timedelta

    from django.db import connections, transaction

    from durable_django import api
    from durable_django.testing import run_until_idle
    from tests.helpers import sql

    parent = api.enqueue("tests.parent", {"child": {"wait_signal": True}})
    run_until_idle()  # the parent waits for its child, which waits for a signal
    child_id = api.get_run(parent.run_id).waiting_for.split(":", 1)[1]
    api.cancel(parent.run_id)  # the whole tree ends cancelled
    assert api.get_run(child_id).status == "cancelled"
    sql("UPDATE durable_run SET updated_at = now() - interval '2 days'")
    journal = sql("SELECT count(*) FROM durable_step WHERE run_id = %s", [parent.run_id])

    resumed, release, purged = threading.Event(), threading.Event(), []

    def resume_and_hold():
        try:
            with transaction.atomic():
                api.resume(parent.run_id)
                resumed.set()
                release.wait(30)
        finally:
            connections.close_all()

    def purge():
        try:
            purged.append(api.purge_finished(older_than=timedelta(days=1)))
        finally:
            connections.close_all()

    holder = threading.Thread(target=resume_and_hold)
    holder.start()
    assert resumed.wait(30)
    purger = threading.Thread(target=purge)
    purger.start()
    purger.join(30)  # the purge skips the tree whose root the resume holds: it takes no lock wait
    release.set()
    holder.join(30)
    assert purged == [0]
    assert api.get_run(parent.run_id).status == "pending" and api.get_run(child_id).status == "cancelled"
    assert sql("SELECT count(*) FROM durable_step WHERE run_id = %s", [parent.run_id]) == journal


def test_the_periodic_purge_takes_its_turn_inside_each_batch_transaction():
    """While another worker's purge batch holds the turn, the periodic purge skips; the turn ends with that
    transaction, so nothing is held between batches (it works through a transaction pooler)."""
    import threading

    from django.db import connections, transaction

    from durable_django.engine import retention

    make_runs("old-", 30, landed_ago=timedelta(days=2))
    cutoff = timezone.now() - timedelta(days=1)
    held, release = threading.Event(), threading.Event()

    def hold_the_turn():
        try:
            with transaction.atomic():
                sql("SELECT pg_advisory_xact_lock(hashtext('durable_django.purge'))")
                held.set()
                release.wait(30)
        finally:
            connections.close_all()

    holder = threading.Thread(target=hold_the_turn)
    holder.start()
    assert held.wait(30)
    try:
        assert retention.purge_unless_another_worker_is(cutoff, 10) is None
        assert len(ids("old-%")) == 30
    finally:
        release.set()
        holder.join(30)
    assert retention.purge_unless_another_worker_is(cutoff, 10) == 30
    assert ids("old-%") == set()
    assert sql(ADVISORY_LOCKS_HERE) == [(0,)]
