"""Pausing a function or a queue: its due runs are held out of the claim, spend nothing, and start in order after."""

import io

import pytest
from django.core.management import CommandError, call_command

from durable_django import api
from durable_django.engine import schedules
from durable_django.engine.reconciler import Reconciler
from durable_django.exceptions import InvalidInput
from durable_django.testing import claim, run_until_idle
from tests.helpers import run_in_threads, sql

pytestmark = pytest.mark.django_db(transaction=True)


def held_by(*runs):
    return [api.get_run(run.run_id).held_by for run in runs]


def test_a_paused_functions_due_runs_stay_pending_held_and_start_in_their_order_once_unpaused():
    before = [api.enqueue("tests.noop", {"n": n}) for n in range(3)]
    other = api.enqueue("tests.slow", {"seconds": 0})
    pause = api.pause(function="tests.noop", reason="a bad deploy")
    assert (pause.function, pause.queue, pause.reason) == ("tests.noop", None, "a bad deploy")
    assert pause.key == "paused:function:tests.noop"
    after = [api.enqueue("tests.noop", {"n": n}, priority=p) for n, p in ((3, 0), (4, 5))]
    assert [run.run_id for run in claim(limit=10)] == [other.run_id]
    assert held_by(*before, *after) == ["paused:function:tests.noop"] * 5
    assert {api.get_run(run.run_id).status for run in before + after} == {"pending"}
    assert claim(limit=10) == []
    assert api.list_pauses() == [pause]
    assert api.unpause(function="tests.noop") is True
    assert api.unpause(function="tests.noop") is False
    assert api.list_pauses() == []
    assert held_by(*before, *after) == [None] * 5
    # Claim order: the higher priority first, then by age.
    expected = [after[1], *before, after[0]]
    assert [run.run_id for run in claim(limit=10)] == [run.run_id for run in expected]


def test_a_paused_queue_holds_only_that_queue():
    mail = api.enqueue("tests.noop", {"n": 1}, queue="mail")
    other = api.enqueue("tests.noop", {"n": 2})
    api.pause(queue="mail")
    later = api.enqueue("tests.noop", {"n": 3}, queue="mail")
    assert [run.run_id for run in claim(limit=10)] == [other.run_id]
    assert held_by(mail, later) == ["paused:queue:mail"] * 2
    api.unpause(queue="mail")
    assert [run.run_id for run in claim(limit=10)] == [mail.run_id, later.run_id]


def test_schedules_keep_firing_into_a_paused_queue():
    api.pause(queue="default")
    api.schedule("tick", "tests.noop", "* * * * *", input={"tick": True})
    sql("UPDATE durable_schedule SET next_fire_at = now() - interval '1 second'")
    fired = schedules.fire_due(names=["tests.noop"], tenant_id=None)
    assert len(fired) == 1
    assert claim(limit=10) == []
    [(run_id, status, held)] = sql("SELECT run_id, status, held_by FROM durable_run")
    assert (status, held) == ("pending", "paused:queue:default")
    api.unpause(queue="default")
    assert [run.run_id for run in claim(limit=10)] == [run_id]


def test_a_paused_run_spends_nothing_of_its_rate_or_concurrency_budget():
    api.pause(function="tests.rated")
    api.pause(function="tests.limited")
    rated = [api.enqueue("tests.rated", {"n": n}) for n in range(8)]
    limited = [api.enqueue("tests.limited", {"key": "k", "n": n}) for n in range(3)]
    assert claim(limit=20) == []
    assert sql("SELECT count(*) FROM durable_rate_start") == [(0,)]
    assert set(held_by(*rated)) == {"paused:function:tests.rated"}
    assert set(held_by(*limited)) == {"paused:function:tests.limited"}
    api.unpause(function="tests.rated")
    api.unpause(function="tests.limited")
    claimed = claim(limit=20)
    # The rate admits five in its window and the key one: both budgets were whole.
    assert sorted(run.name for run in claimed) == ["tests.limited"] + ["tests.rated"] * 5


def test_a_due_waiting_run_of_a_paused_function_is_held_pending_and_replays_its_wait_after():
    run = api.enqueue("tests.sleeper", {"seconds": 3600})
    run_until_idle()
    assert api.get_run(run.run_id).status == "waiting"
    api.pause(function="tests.sleeper")
    sql("UPDATE durable_run SET available_at = now() - interval '1 second' WHERE run_id = %s", [run.run_id])
    assert claim(limit=10) == []
    held = api.get_run(run.run_id)
    assert (held.status, held.held_by, held.waiting_for) == ("pending", "paused:function:tests.sleeper", None)
    api.unpause(function="tests.sleeper")
    assert run_until_idle() == 1
    assert api.get_run(run.run_id).status == "waiting"  # the journalled sleep still has an hour to go


def test_naming_neither_or_both_or_an_empty_name_is_invalid_and_writes_nothing():
    for kwargs in ({}, {"function": "a", "queue": "b"}, {"function": ""}, {"queue": 7}, {"function": "a\x00"}):
        with pytest.raises(InvalidInput):
            api.pause(**kwargs)
    with pytest.raises(InvalidInput):
        api.pause(function="tests.noop", reason=3)
    with pytest.raises(InvalidInput):
        api.unpause()
    assert api.list_pauses() == []


def test_pausing_again_keeps_the_pause_and_takes_the_new_reason():
    first = api.pause(queue="mail", reason="one")
    second = api.pause(queue="mail", reason="two")
    assert (second.created_at, second.reason) == (first.created_at, "two")
    assert api.list_pauses() == [second]


def test_the_reconciler_releases_runs_held_by_a_pause_that_no_longer_exists_and_only_those():
    paused = api.enqueue("tests.noop", {"n": 1})
    api.pause(function="tests.noop")
    stale = api.enqueue("tests.slow", {"seconds": 0})
    sql("UPDATE durable_run SET held_by = 'paused:function:tests.slow' WHERE run_id = %s", [stale.run_id])
    repairs = Reconciler().run_pass()
    assert [repair.run_id for repair in repairs] == ["paused:function:tests.slow"]
    assert held_by(paused, stale) == ["paused:function:tests.noop", None]
    api.unpause(function="tests.noop")


def test_claims_racing_pauses_and_unpauses_never_leave_a_run_held_by_an_ended_pause():
    runs = [api.enqueue("tests.noop", {"n": n}) for n in range(300)]

    def work(index):
        for round in range(15):
            if index == 0:
                api.pause(function="tests.noop")
                api.unpause(function="tests.noop")
            else:
                api.enqueue("tests.noop", {"thread": index, "round": round})
                claim(limit=5, worker_id=f"w{index}")

    run_in_threads(4, work)
    assert api.list_pauses() == []
    assert sql("SELECT count(*) FROM durable_run WHERE held_by IS NOT NULL") == [(0,)]
    assert Reconciler().stranded() == []
    assert runs


def command(*args):
    out = io.StringIO()
    call_command(*args, stdout=out)
    return out.getvalue().strip()


def test_the_commands_pause_list_and_unpause():
    assert command("durable_pause", "--function", "tests.noop", "--reason", "bad deploy").startswith(
        "paused function tests.noop since "
    )
    command("durable_pause", "--queue", "mail")
    listed = command("durable_pause", "--list").splitlines()
    assert [line.split(" since ")[0] for line in listed] == ["function tests.noop", "queue mail"]
    assert listed[0].endswith(": bad deploy")
    assert command("durable_unpause", "--queue", "mail") == "unpaused queue mail"
    assert command("durable_unpause", "--queue", "mail") == "queue mail was not paused"
    with pytest.raises(CommandError, match="non-empty"):
        command("durable_pause", "--function", "")
    with pytest.raises(CommandError):
        command("durable_pause", "--function", "a", "--queue", "b")
    assert [pause.key for pause in api.list_pauses()] == ["paused:function:tests.noop"]
