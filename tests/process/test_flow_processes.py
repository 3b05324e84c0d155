"""Flow control across real worker processes: limits hold across every worker, from the runs' own logs."""

import collections
import itertools
import threading
import time

import pytest
from django.db import connections

from durable_django import api
from durable_django.store.db import DONE_CHANNEL
from durable_django.store.sessions import listening
from tests.helpers import sql, wait_until
from tests.workflows import effects

pytestmark = [pytest.mark.process, pytest.mark.django_db(transaction=True)]


def events(name):
    """(time, what, run_id, pid, key) per line the runs logged."""
    path = effects._path(name)
    with open(path) as handle:
        rows = [line.split() for line in handle if line.strip()]
    return [(float(at), what, run_id, pid, key) for at, what, run_id, pid, key in rows]


def test_a_key_limited_to_one_never_runs_twice_at_once_across_three_workers(workers):
    workers.wait_started(*(workers.start("--concurrency", "4") for _ in range(3)))
    runs = [api.enqueue("tests.limited", {"key": f"k{n % 20}", "seconds": 0.02}) for n in range(200)]
    most_seen = collections.Counter()
    stop = threading.Event()

    def sample():  # the database's view, at every landing (a run of another key may start at any time)
        try:
            with listening([DONE_CHANNEL]) as session:
                while not stop.is_set():
                    for _ in session.notifies(timeout=1.0):
                        for key, running in sql(
                            "SELECT concurrency_key, count(*) FROM durable_run "
                            "WHERE status = 'running' GROUP BY concurrency_key"
                        ):
                            most_seen[key] = max(most_seen[key], running)
        finally:
            connections.close_all()

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        wait_until(
            lambda: sql("SELECT count(*) FROM durable_run WHERE status = 'succeeded'")[0][0] == len(runs),
            timeout=120,
            message="every run",
        )
    finally:
        stop.set()
        sampler.join(30)
    assert most_seen and max(most_seen.values()) == 1, most_seen
    # The runs' own log: per key, each run's start comes after the previous run's end.
    by_run = collections.defaultdict(dict)
    for at, what, run_id, pid, key in events("limited-events"):
        by_run[run_id].update({what: at, "key": key, "pid": pid})
    assert len(by_run) == len(runs)
    assert len({entry["pid"] for entry in by_run.values()}) > 1  # more than one worker took part
    per_key = collections.defaultdict(list)
    for entry in by_run.values():
        per_key[entry["key"]].append((entry["start"], entry["end"]))
    for key, spans in per_key.items():
        spans.sort()
        assert all(later[0] >= earlier[1] for earlier, later in itertools.pairwise(spans)), key


def test_while_waiting_keeps_a_second_run_of_the_key_out_while_the_first_sleeps(workers):
    first = api.enqueue("tests.mutex", {"key": "k", "seconds": 2})
    workers.start("--concurrency", "4")
    wait_until(lambda: api.get_run(first.run_id).status == "waiting", message="the first run's sleep")
    second = api.enqueue("tests.mutex", {"key": "k", "seconds": 0})
    wait_until(lambda: api.get_run(second.run_id).status == "succeeded", timeout=60, message="the second run")
    assert api.get_run(first.run_id).status == "succeeded"
    # The second began only once the first had finished its sleep and its last step.
    first_after = api.get_run(first.run_id).finished_at
    second_began = api.get_run(second.run_id).started_at
    assert second_began >= first_after


def test_a_rate_limit_never_starts_more_than_its_limit_in_any_second_across_three_workers(workers):
    runs = [api.enqueue("tests.rated", {"n": n}) for n in range(30)]  # 5 starts per second
    for _ in range(3):
        workers.start("--concurrency", "4")
    wait_until(
        lambda: sql("SELECT count(*) FROM durable_run WHERE status = 'succeeded'")[0][0] == len(runs),
        timeout=120,
        message="every run",
    )
    # An attempt starts, for a rate limit, when its claim commits: the runs' own start times.
    starts = sorted(at for (at,) in sql("SELECT extract(epoch FROM started_at)::float8 FROM durable_run"))
    assert len(starts) == len(runs)
    # In every window of one second (sliding, from each start), at most five starts.
    assert max(sum(1 for other in starts if start <= other < start + 1.0) for start in starts) <= 5
    assert starts[-1] - starts[0] >= 4.0  # thirty starts at five a second take five windows
    # And every handler began after its claim (the runs' own log).
    began = {run_id: at for at, _, run_id, _, _ in events("rated-events")}
    claimed = dict(sql("SELECT run_id, extract(epoch FROM started_at)::float8 FROM durable_run"))
    assert began.keys() == claimed.keys()
    assert all(began[run_id] >= claimed[run_id] for run_id in began)


def test_ten_thousand_runs_held_behind_one_key_do_not_delay_another_key_and_spend_nothing(workers):
    sql("""
        INSERT INTO durable_run (run_id, name, version, status, input, retry_policy, queue, priority,
                                 concurrency_key, concurrency_limit, created_at, updated_at)
        SELECT 'hot-' || g, 'tests.limited', 1, 'pending', '{"key": "hot", "seconds": 3600}', '{}', 'default', 0,
               'concurrency:tests.limited:hot', 1, now() - interval '1 hour', now()
        FROM generate_series(1, 10000) g
    """)
    for _ in range(2):
        workers.start("--concurrency", "4")
    # The hot key's one admitted run outlives the test (the workers are killed at teardown): were it to end, it
    # would release a held run, and a loaded machine that holds the backlog late would never see 9,999 held.
    wait_until(
        lambda: sql("SELECT count(*) FROM durable_run WHERE held_by = 'concurrency:tests.limited:hot'")[0][0] == 9_999,
        timeout=120,
        message="the hot key's runs held",
    )
    enqueued = time.monotonic()
    others = [api.enqueue("tests.limited", {"key": f"cold-{n}"}) for n in range(20)]
    wait_until(
        lambda: all(api.get_run(run.run_id).status == "succeeded" for run in others),
        timeout=60,
        message="the other keys' runs",
    )
    assert time.monotonic() - enqueued < 10  # not behind the ten thousand (a run takes milliseconds)
    [(attempts, failures, recoveries)] = sql(
        "SELECT max(attempts), max(failures), max(recoveries) FROM durable_run WHERE held_by IS NOT NULL"
    )
    assert (attempts, failures, recoveries) == (0, 0, 0)
    assert effects.count("limited-events") == 2 * 20 + 1  # the others, and the hot key's one start


def test_sleepers_that_wake_behind_a_full_key_never_keep_idle_slots_from_other_runs(workers):
    workers.start("--concurrency", "4", DURABLE_TEST_POLL_SECONDS="1")
    nappers = [api.enqueue("tests.limited_nap", {"key": "k", "nap": 2, "n": n}) for n in range(4)]
    # One at a time they start and nap, each freeing the key's one slot as it sleeps.
    wait_until(
        lambda: {api.get_run(run.run_id).status for run in nappers} == {"waiting"}, timeout=60, message="the naps"
    )
    busy = api.enqueue("tests.limited_nap", {"key": "k", "busy": 20})
    wait_until(lambda: effects.exists("limited-nap-busy"), timeout=60, message="the key to be taken")
    wait_until(
        lambda: (
            sql(
                "SELECT count(*) FROM durable_run WHERE run_id = ANY(%s) AND status = 'waiting'"
                " AND available_at > now()",
                [[run.run_id for run in nappers]],
            )
            == [(0,)]
        ),
        timeout=60,
        message="the naps to end behind the busy key",
    )
    free = [api.enqueue("tests.noop", {"n": n}) for n in range(3)]
    wait_until(
        lambda: {api.get_run(run.run_id).status for run in free} == {"succeeded"}, timeout=60, message="free runs"
    )
    assert api.get_run(busy.run_id).status == "running"  # they ran beside it, not after it
    wait_until(
        lambda: {api.get_run(run.run_id).status for run in [busy, *nappers]} == {"succeeded"},
        timeout=90,
        message="the key's runs, one after another",
    )
