"""Flow control: concurrency limits, rate limits and debounce, enforced at claim time in PostgreSQL."""

import collections
from datetime import timedelta

import pytest

from durable_django import Concurrency, Debounce, RateLimit, api
from durable_django.engine.reconciler import Reconciler
from durable_django.exceptions import InvalidInput
from durable_django.testing import claim, make_due, run_until_idle
from tests.helpers import run_in_threads, sql
from tests.store.factories import complete
from tests.workflows import effects

pytestmark = pytest.mark.django_db(transaction=True)


def statuses(*runs):
    return [api.get_run(run.run_id).status for run in runs]


def test_a_second_run_of_a_key_is_held_pending_spending_nothing_and_runs_once_the_first_lands():
    first, second = (api.enqueue("tests.limited", {"key": "a"}) for _ in range(2))
    other = api.enqueue("tests.limited", {"key": "b"})
    held = {run.run_id for run in claim(limit=10)}
    assert held == {first.run_id, other.run_id}
    waiting = api.get_run(second.run_id)
    assert (waiting.status, waiting.held_by) == ("pending", "concurrency:tests.limited:a")
    assert (waiting.attempts, waiting.failures, waiting.recoveries) == (0, 0, 0)
    assert claim(limit=10) == []  # the held run is not even looked at
    sql("UPDATE durable_run SET status = 'succeeded', finished_at = now() WHERE run_id = %s", [first.run_id])
    assert claim(limit=10) == []  # a slot freed outside the engine releases nothing by itself...
    assert [repair.run_id for repair in Reconciler().run_pass()] == ["concurrency:tests.limited:a"]
    assert api.get_run(second.run_id).held_by is None  # ...the reconciler's pass does
    [next_run] = claim(limit=10)
    assert next_run.run_id == second.run_id and next_run.held_by is None


def test_a_run_a_landing_released_that_no_claim_reached_yet_is_no_hold_to_repair():
    """A landing releases one run its key held; a backlog of older runs may keep every worker busy for
    seconds before a claim reaches it. Meanwhile the key's free slot is that run's: the reconciler finds
    nothing stranded and releases no second run (the workload fuzzer saw it do so under a backlog)."""
    holder, *others = [api.enqueue("tests.limited", {"key": "a", "n": n}) for n in range(3)]
    assert [run.run_id for run in claim(limit=10)] == [holder.run_id]
    assert complete(api.get_run(holder.run_id), "null") == "succeeded"
    assert [api.get_run(run.run_id).held_by for run in others] == [None, "concurrency:tests.limited:a"]
    assert Reconciler().run_pass() == []
    assert api.get_run(others[1].run_id).held_by == "concurrency:tests.limited:a"
    assert [run.run_id for run in claim(limit=10)] == [others[0].run_id]  # the released run takes the slot


def test_landing_the_holder_releases_the_run_its_key_held():
    runs = [api.enqueue("tests.limited", {"key": "a", "n": n}) for n in range(3)]
    assert run_until_idle() == 3
    assert statuses(*runs) == ["succeeded"] * 3
    assert effects.count("limited-events") == 6


def test_a_saturated_key_holds_all_its_due_runs_at_once_and_blocks_no_other_key():
    saturated = [api.enqueue("tests.limited", {"key": "hot", "n": n}) for n in range(200)]
    other = api.enqueue("tests.limited", {"key": "cold"})
    [first] = claim(limit=1)
    assert first.run_id == saturated[0].run_id
    # One claim looks at the hot key's next run, finds the key saturated, and holds every due run of it.
    assert [run.run_id for run in claim(limit=1)] == []
    assert sql("SELECT count(*) FROM durable_run WHERE held_by = 'concurrency:tests.limited:hot'") == [(199,)]
    assert [run.run_id for run in claim(limit=1)] == [other.run_id]


def test_while_waiting_a_sleeping_run_keeps_its_key_and_a_second_run_waits_for_its_end():
    first = api.enqueue("tests.mutex", {"key": "k", "seconds": 3600})
    run_until_idle()
    assert api.get_run(first.run_id).status == "waiting"
    second = api.enqueue("tests.mutex", {"key": "k", "seconds": 3600})
    assert run_until_idle() == 0
    assert api.get_run(second.run_id).held_by == "concurrency:tests.mutex:k"
    make_due(first.run_id)  # the first one's sleep ends: it finishes, and only then the second starts
    assert run_until_idle() == 2
    assert statuses(first, second) == ["succeeded", "waiting"]
    assert effects.count("mutex-before") == 2 and effects.count("mutex-after") == 1


def test_without_while_waiting_a_sleeping_run_frees_its_slot():
    first = api.enqueue("tests.limited", {"key": "k"})
    [held] = claim(limit=1)
    from durable_django.store import waits

    waits.sleep(held.run_id, held.attempts, "v1:nap:0", seconds=3600)  # it sleeps: it holds no slot
    second = api.enqueue("tests.limited", {"key": "k"})
    assert [run.run_id for run in claim(limit=1)] == [second.run_id]
    assert api.get_run(first.run_id).status == "waiting"


def test_a_rate_limit_admits_its_limit_per_window_and_holds_the_rest_until_the_window_reopens():
    runs = [api.enqueue("tests.rated", {"n": n}) for n in range(8)]
    assert len(claim(limit=10)) == 5
    held = [api.get_run(run.run_id) for run in runs[5:]]
    assert {run.held_by for run in held} == {"rate:tests.rated"}
    assert all(run.available_at is not None for run in held)  # looked at again when the window reopens
    assert claim(limit=10) == []
    sql("UPDATE durable_rate_start SET started_at = started_at - interval '2 seconds'")  # the window passes
    sql("UPDATE durable_run SET available_at = now() WHERE held_by IS NOT NULL")
    # One claim releases the held runs whose window reopened and admits them.
    assert sorted(run.run_id for run in claim(limit=10)) == sorted(run.run_id for run in runs[5:])


def test_an_admission_records_its_starts_in_one_row_and_a_window_counts_the_rows_inside_it():
    runs = [api.enqueue("tests.rated", {"n": n}) for n in range(9)]  # five starts a second
    assert [len(claim(limit=2)) for _ in range(3)] == [2, 2, 1]  # the third has room for one start only
    rows = sql("SELECT starts, total FROM durable_rate_start ORDER BY total")
    assert rows == [(2, 2), (2, 4), (1, 5)]  # one row per admission, with the key's running total
    # The first admission's two starts leave the window: three are left in it, so two more may start.
    sql("UPDATE durable_rate_start SET started_at = started_at - interval '2 seconds' WHERE total = 2")
    sql("UPDATE durable_run SET available_at = now() WHERE held_by IS NOT NULL")
    assert len(claim(limit=10)) == 2
    assert sql("SELECT count(*) FROM durable_run WHERE status = 'running'") == [(7,)]
    assert sql("SELECT starts, total FROM durable_rate_start ORDER BY total DESC LIMIT 1") == [(2, 7)]
    assert len(runs) - 7 == sql("SELECT count(*) FROM durable_run WHERE held_by = 'rate:tests.rated'")[0][0]


# The window's starts moved a minute ahead: it stays full however slow the test's claims.
KEEP_THE_WINDOW_FULL = "UPDATE durable_rate_start SET started_at = started_at + interval '1 minute'"


def test_runs_held_while_a_rate_limit_holds_others_queue_behind_them_never_more_at_a_turn_than_it_frees():
    for n in range(5):
        api.enqueue("tests.rated", {"n": n})  # five starts a second
    assert len(claim(limit=5)) == 5  # one admission: the window's five starts at one instant
    sql(KEEP_THE_WINDOW_FULL)
    for batch in range(2):  # runs enqueued while the window is full, held by two claims of two candidates
        for n in range(8):
            api.enqueue("tests.rated", {"n": n, "batch": batch})
        assert claim(limit=2) == []
    held = "SELECT available_at FROM durable_run WHERE held_by IS NOT NULL ORDER BY created_at"
    rechecks = [at for (at,) in sql(held)]
    assert len(rechecks) == 16 and rechecks == sorted(rechecks)  # in the order they came
    # Each start makes room for one run a window after it: five at a turn, a window apart, the second
    # claim's runs after the first's (not given the same turns again).
    assert sorted(collections.Counter(rechecks).items()) == [
        (at, count) for at, count in zip(sorted(set(rechecks)), [5, 5, 5, 1], strict=True)
    ]


def test_a_held_run_whose_turn_came_while_the_window_was_still_full_keeps_its_place_in_front():
    for n in range(5):
        api.enqueue("tests.rated", {"n": n})  # five starts a second
    assert len(claim(limit=5)) == 5
    sql(KEEP_THE_WINDOW_FULL)
    for n in range(20):
        api.enqueue("tests.rated", {"n": n})
    assert claim(limit=1) == []  # the twenty held, five at each of four turns
    turns = sorted({at for (at,) in sql("SELECT available_at FROM durable_run WHERE held_by IS NOT NULL")})
    [(first,)] = sql("SELECT run_id FROM durable_run WHERE held_by IS NOT NULL ORDER BY created_at LIMIT 1")
    sql("UPDATE durable_run SET available_at = now() WHERE run_id = %s", [first])  # its turn, come early
    assert claim(limit=1) == []  # released, and the window has no room yet
    [(held_by, again)] = sql("SELECT held_by, available_at FROM durable_run WHERE run_id = %s", [first])
    assert held_by == "rate:tests.rated" and again == turns[0]  # the next turn, not behind the other nineteen


def test_a_claim_releases_no_more_runs_a_rate_limit_held_than_it_has_free_slots():
    runs = [api.enqueue("tests.rated", {"n": n}) for n in range(10)]
    assert len(claim(limit=5)) == 5
    sql("UPDATE durable_rate_start SET started_at = started_at - interval '2 seconds'")  # the window passes
    sql("UPDATE durable_run SET available_at = now() WHERE held_by IS NOT NULL")
    assert len(claim(limit=10, started=2)) == 2
    # The other three stay held (released, they could not start: a rate limit never claims ahead of a slot).
    assert sql("SELECT count(*) FROM durable_run WHERE held_by = 'rate:tests.rated'") == [(3,)]
    assert len(claim(limit=10)) == 3
    assert statuses(*runs) == ["running"] * 10


def test_a_held_run_can_be_cancelled_and_holds_nothing_after():
    _first, second = (api.enqueue("tests.limited", {"key": "a"}) for _ in range(2))
    claim(limit=10)
    assert api.get_run(second.run_id).held_by is not None
    assert api.cancel(second.run_id).value == "cancelled"
    assert api.get_run(second.run_id).held_by is None


def test_a_key_callable_that_raises_or_returns_no_string_is_invalid_input_and_writes_nothing():
    with pytest.raises(InvalidInput, match=r"Concurrency.key raised KeyError"):
        api.enqueue("tests.bad_key", {"other": 1})
    with pytest.raises(InvalidInput, match=r"RateLimit.key must return a str or None, got 42"):
        api.enqueue("tests.number_key", {})
    assert sql("SELECT count(*) FROM durable_run") == [(0,)]


def test_a_key_callable_returning_none_leaves_that_run_unlimited():
    runs = [api.enqueue("tests.limited", {"n": n}) for n in range(3)]  # no "key": None
    assert len(claim(limit=10)) == 3
    assert {api.get_run(run.run_id).held_by for run in runs} == {None}


@pytest.mark.parametrize(
    "limit",
    [
        lambda: Concurrency(0),
        lambda: Concurrency(1, key="not callable"),
        lambda: RateLimit(1, per=0),
        lambda: RateLimit(1, per=float("inf")),
        lambda: Debounce("", 1),
        lambda: Debounce("k", -1),
    ],
)
def test_bad_limits_are_invalid_input(limit):
    with pytest.raises(InvalidInput):
        limit()


def test_queue_limits_from_settings_apply_to_every_run_of_the_queue(settings):
    settings.DURABLE = {**settings.DURABLE, "QUEUES": {"emails": {"concurrency": 2}}}
    runs = [api.enqueue("tests.noop", {"n": n}, queue="emails") for n in range(4)]
    free = api.enqueue("tests.noop", {}, queue="default")
    claimed = {run.run_id for run in claim(limit=10)}
    assert claimed == {runs[0].run_id, runs[1].run_id, free.run_id}
    assert {api.get_run(run.run_id).held_by for run in runs[2:]} == {"concurrency:queue:emails"}
    assert run_until_idle() == 0  # the queue's two slots are taken
    for run in (api.get_run(runs[0].run_id), api.get_run(runs[1].run_id)):
        complete(run, "null")  # each landing frees a slot and releases one held run
    assert run_until_idle() == 2
    assert statuses(*runs) == ["succeeded"] * 4


def test_a_queue_rate_limit_holds_starts_beyond_it(settings):
    settings.DURABLE = {**settings.DURABLE, "QUEUES": {"slow": {"rate_limit": (2, 60)}}}
    runs = [api.enqueue("tests.noop", {"n": n}, queue="slow") for n in range(5)]
    assert len(claim(limit=10)) == 2
    assert {api.get_run(run.run_id).held_by for run in runs[2:]} == {"rate:queue:slow"}


def test_two_workers_claiming_the_last_free_slot_of_a_key_at_once_never_both_win():
    for round_ in range(40):
        runs = [api.enqueue("tests.limited", {"key": f"k{round_}"}) for _ in range(2)]
        won = run_in_threads(2, lambda index: claim(limit=1, worker_id=f"w{index}"))
        assert sum(len(claimed) for claimed in won) == 1, won
        running = sql(
            "SELECT count(*) FROM durable_run WHERE concurrency_key = %s AND status = 'running'",
            [f"concurrency:tests.limited:k{round_}"],
        )
        assert running == [(1,)]
        for run in runs:
            api.cancel(run.run_id)


def test_debounce_gives_one_run_with_the_last_input_started_after_the_last_call():
    runs = [api.enqueue("tests.noop", {"n": n}, debounce=Debounce("refresh", delay=60)) for n in range(50)]
    assert len({run.run_id for run in runs}) == 1
    assert [run.input for run in runs] == [{"n": n} for n in range(50)]  # each call sees its own input
    [(count,)] = sql("SELECT count(*) FROM durable_run")
    assert count == 1
    run = api.get_run(runs[0].run_id)
    assert run.input == {"n": 49}
    assert run.available_at - runs[0].available_at >= timedelta(0)  # moved with each call


def test_debounce_never_starts_later_than_max_wait_after_the_first_call():
    first = api.enqueue("tests.noop", {"n": 0}, debounce=Debounce("k", delay=3600, max_wait=60))
    sql("UPDATE durable_run SET debounce_until = now() + interval '1 second' WHERE run_id = %s", [first.run_id])
    later = api.enqueue("tests.noop", {"n": 1}, debounce=Debounce("k", delay=3600, max_wait=60))
    assert later.run_id == first.run_id
    assert later.available_at - later.updated_at < timedelta(seconds=2)  # capped, not an hour away
    assert first.available_at - first.created_at >= timedelta(minutes=59)


def test_once_the_debounced_run_is_claimed_the_next_call_makes_a_new_run():
    first = api.enqueue("tests.noop", {"n": 0}, debounce=Debounce("k", delay=0))
    claim(limit=1)
    second = api.enqueue("tests.noop", {"n": 1}, debounce=Debounce("k", delay=0))
    assert second.run_id != first.run_id


def test_debounce_keys_are_per_tenant_and_per_function():
    import uuid

    runs = {
        api.enqueue("tests.noop", {}, debounce=Debounce("k", delay=60)).run_id,
        api.enqueue("tests.noop", {}, debounce=Debounce("k", delay=60), tenant_id=uuid.uuid4()).run_id,
        api.enqueue("tests.two_steps", {}, debounce=Debounce("k", delay=60)).run_id,
    }
    assert len(runs) == 3


@pytest.mark.parametrize("options", [{"idempotency_key": "i"}, {"coalesce_key": "c"}, {"delay": 5}])
def test_debounce_with_keys_or_a_delay_of_its_own_is_invalid_input(options):
    with pytest.raises(InvalidInput):
        api.enqueue("tests.noop", {}, debounce=Debounce("k", delay=1), **options)
    assert sql("SELECT count(*) FROM durable_run") == [(0,)]


def test_concurrent_debounced_calls_make_one_run():
    runs = run_in_threads(
        8, lambda index: api.enqueue("tests.noop", {"i": index}, debounce=Debounce("burst", delay=60))
    )
    assert len({run.run_id for run in runs}) == 1


def test_a_bad_queues_setting_fails_a_system_check(settings):
    from durable_django.checks import check_settings

    settings.DURABLE = {**settings.DURABLE, "QUEUES": {"emails": {"concurrency": 0}}}
    assert [error.id for error in check_settings()] == ["durable_django.E010"]
    settings.DURABLE = {**settings.DURABLE, "QUEUES": {"emails": {"rate_limit": 5}}}
    assert [error.id for error in check_settings()] == ["durable_django.E010"]
