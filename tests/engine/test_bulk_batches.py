"""A bulk operation's batch, set-based, gives every run what the client API called run by run gives it.

Two identical worlds of runs in every state (pending, claimed, executing, sleeping, waiting for children at
two depths, past a pivot, finished), their children matched too: one is acted on run by run, newest first,
with ``api.cancel`` / ``api.resume`` / ``api.retry_as_new_run`` (what the bulk operation did before); the
other by one batch. Outcomes, rows, signals and wake-ups are compared run by run.
"""

import json

import pytest

from durable_django import api, signals
from durable_django.api.bulk import bulk_filters
from durable_django.engine import bulk_batch
from durable_django.exceptions import DurableError, RunNotFound
from durable_django.states import TERMINAL_STATUSES, RunStatus
from durable_django.testing import claim, run_until_idle
from durable_django.types import Run
from tests.helpers import sql

pytestmark = pytest.mark.django_db(transaction=True)

ROOTS = [
    ("pending", "tests.noop", {}),
    ("claimed", "tests.quick_then_done", {}),
    ("executing", "tests.quick_then_done", {}),
    ("sleeping", "tests.sleeper", {"seconds": 3600}),
    ("grandparent", "tests.grandparent", {}),
    ("fan_out", "tests.fan_out", {"children": [{"value": n, "wait_signal": True} for n in range(3)]}),
    ("pivot", "tests.pivot", {}),
    ("pivot_gatherer", "tests.pivot_gatherer", {"n": 2}),
    ("succeeded", "tests.noop", {"done": True}),
    ("failed", "tests.noop", {}),
]


def make_worlds():
    """Two worlds, A and B, of the same runs in the same states; returns {world: {role: run_id}}."""
    roots = {
        world: {role: api.enqueue(name, {**input, "world": world}).run_id for role, name, input in ROOTS}
        for world in "AB"
    }
    for world in "AB":
        sql(
            "UPDATE durable_run SET available_at = now() + interval '1 hour' WHERE run_id = ANY(%s)",
            [[roots[world][role] for role in ("pending", "claimed", "executing", "failed")]],
        )
    run_until_idle()
    for world in "AB":
        sql(
            "UPDATE durable_run SET available_at = NULL WHERE run_id = ANY(%s)",
            [[roots[world][role] for role in ("claimed", "executing")]],
        )
        held = claim(functions=["tests.quick_then_done"], limit=2, started=1, worker_id=f"w{world}")
        assert len(held) == 2
        [executing] = sql(
            "SELECT run_id FROM durable_run WHERE run_id = ANY(%s) AND attempt_started_at IS NOT NULL",
            [[run.run_id for run in held]],
        )
        if executing[0] != roots[world]["executing"]:  # keep the roles as named
            roots[world]["executing"], roots[world]["claimed"] = roots[world]["claimed"], roots[world]["executing"]
        sql(
            "UPDATE durable_run SET status = 'failed', finished_at = now(), available_at = NULL WHERE run_id = %s",
            [roots[world]["failed"]],
        )
    return {world: roles_of(roots[world]) for world in "AB"}


def roles_of(roots):
    """Every run of a world's trees by role: a root's name, a descendant's parent's role and its place."""
    roles = {}
    for role, run_id in roots.items():
        roles[role] = run_id
        frontier = [(role, run_id)]
        while frontier:
            parent_role, parent_id = frontier.pop()
            children = sql(
                "SELECT run_id, name FROM durable_run WHERE parent_run_id = %s ORDER BY created_at, run_id", [parent_id]
            )
            for index, (child_id, name) in enumerate(children):
                roles[f"{parent_role}/{name}#{index}"] = child_id
                frontier.append((f"{parent_role}/{name}#{index}", child_id))
    return roles


def state(run_id):
    run = api.get_run(run_id)
    waiting = None if run.waiting_for is None else run.waiting_for.split(":")[0]
    return (
        run.status,
        run.cancel_requested_at is not None,
        run.cancel_refused_at is not None,
        waiting,
        run.finished_at is not None,
        run.available_at is not None,
        run.held_by,
        run.failures,
    )


def newest_first(run_ids) -> list[Run]:
    """The runs as a bulk operation's page lists them: newest first."""
    runs = [api.get_run(run_id) for run_id in run_ids]
    return sorted(runs, key=lambda run: (run.created_at, run.run_id), reverse=True)


def one_by_one(operation, runs, bulk_run_id):
    """What the bulk operation did before: the client API, run by run."""
    outcomes = {}
    for run in runs:
        try:
            if operation == "cancel":
                outcomes[run.run_id] = api.cancel(run.run_id).value
            elif run.status not in (
                (RunStatus.FAILED, RunStatus.CANCELLED) if operation == "resume" else TERMINAL_STATUSES
            ):
                outcomes[run.run_id] = "skipped"
            elif operation == "resume":
                api.resume(run.run_id)
                outcomes[run.run_id] = "resumed"
            else:
                api.retry_as_new_run(run.run_id, idempotency_key=bulk_batch.retry_key(bulk_run_id, run.run_id))
                outcomes[run.run_id] = "retried"
        except RunNotFound:
            outcomes[run.run_id] = "not found"
        except DurableError:
            outcomes[run.run_id] = "refused"
    return outcomes


def compare(operation, worlds, finished):
    by_id = {world: {run_id: role for role, run_id in worlds[world].items()} for world in "AB"}
    runs = {world: newest_first(worlds[world].values()) for world in "AB"}
    assert [by_id["A"][run.run_id] for run in runs["A"]] == [by_id["B"][run.run_id] for run in runs["B"]]
    expected = one_by_one(operation, runs["A"], "bulk-A")
    before = set(finished)
    counts = bulk_batch.act("bulk-B", operation, runs["B"])
    batch_finished = [run_id for run_id in finished if run_id not in before]
    assert sum(counts.values()) == len(runs["B"])
    outcomes_a = {by_id["A"][run_id]: outcome for run_id, outcome in expected.items()}
    states_a = {role: state(run_id) for role, run_id in worlds["A"].items()}
    states_b = {role: state(run_id) for role, run_id in worlds["B"].items()}
    for role in worlds["A"]:
        assert states_b[role] == states_a[role], role
    expected_counts = {}
    for outcome in outcomes_a.values():
        expected_counts[outcome] = expected_counts.get(outcome, 0) + 1
    assert counts == expected_counts
    return outcomes_a, batch_finished


@pytest.fixture
def finished_signals():
    heard = []

    def receiver(sender, run, **kwargs):
        heard.append(run.run_id)

    signals.run_finished.connect(receiver, sender=Run)
    yield heard
    signals.run_finished.disconnect(receiver, sender=Run)


def test_a_cancel_batch_gives_each_run_what_cancel_gives_it_run_by_run(finished_signals):
    worlds = make_worlds()
    finished_signals.clear()
    outcomes, batch_finished = compare("cancel", worlds, finished_signals)
    assert set(outcomes.values()) == {"cancelled", "requested", "refused"}
    assert outcomes["executing"] == "requested" and outcomes["claimed"] == "cancelled"
    assert outcomes["pivot"] == "refused" and outcomes["succeeded"] == "refused"
    assert outcomes["fan_out/tests.child#0"] == "cancelled" and outcomes["grandparent"] == "cancelled"
    # run_finished: once per run the batch cancelled, as cancel() sends it.
    cancelled_b = sorted(worlds["B"][role] for role, outcome in outcomes.items() if outcome == "cancelled")
    assert sorted(batch_finished) == cancelled_b


def test_a_resume_batch_gives_each_run_what_resume_gives_it_run_by_run():
    worlds = make_worlds()
    for world in "AB":  # end every tree, then resume them all
        for role in ("grandparent", "fan_out", "pending", "sleeping"):
            api.cancel(worlds[world][role])
    outcomes, _ = compare("resume", worlds, [])
    assert outcomes["grandparent"] == "resumed" and outcomes["fan_out"] == "resumed"
    assert outcomes["grandparent/tests.parent#0"] == "refused"  # its parent had finished
    assert outcomes["failed"] == "resumed" and outcomes["succeeded"] == "skipped"
    assert outcomes["executing"] == "skipped"


def test_a_retry_batch_makes_the_runs_retry_as_new_run_makes_and_joins_them_when_redone():
    worlds = make_worlds()
    for world in "AB":
        api.cancel(worlds[world]["fan_out"])
    outcomes, _ = compare("retry", worlds, [])
    assert {"retried", "skipped"} <= set(outcomes.values())
    made = {
        world: sql(
            "SELECT name, input::text, version, queue, priority, retry_policy::text FROM durable_run "
            "WHERE idempotency_key LIKE %s ORDER BY name, input::text",
            [f"%durable_django.bulk:bulk-{world}:%"],
        )
        for world in "AB"
    }

    def without_world(rows):
        def plain(input):
            return json.dumps({k: v for k, v in json.loads(input).items() if k != "world"}, sort_keys=True)

        return sorted((name, plain(input), *rest) for name, input, *rest in rows)

    assert made["A"] and without_world(made["A"]) == without_world(made["B"])
    assert len(made["B"]) == sum(1 for outcome in outcomes.values() if outcome == "retried")
    # Redone (a crash after its commit), the batch makes no second run.
    runs = newest_first(worlds["B"].values())
    bulk_batch.act("bulk-B", "retry", runs)
    assert len(sql("SELECT 1 FROM durable_run WHERE idempotency_key LIKE '%%durable_django.bulk:bulk-B:%%'")) == len(
        made["B"]
    )


def test_a_batch_page_lists_the_runs_list_runs_lists_page_by_page():
    tenant = "2b5c7470-a1a1-490b-bf48-106cbad21b8d"
    api.enqueue_many("tests.noop", [{"n": n, "odd": n % 2 == 1} for n in range(25)])
    api.enqueue_many("tests.noop", [{"n": n} for n in range(5)], tenant_id=tenant)
    api.enqueue_many("tests.sleeper", [{"seconds": 1, "n": n} for n in range(7)])
    sql("UPDATE durable_run SET status = 'failed', finished_at = now() WHERE input @> '{\"odd\": true}'")
    for filters in (
        {},
        {"status": "failed"},
        {"name": "tests.noop"},
        {"tenant_id": tenant},
        {"input_contains": {"odd": True}},
    ):
        listed, expected = [], []
        cursor = None
        while True:
            items, cursor = bulk_batch.page(bulk_filters(filters), cursor, 4)
            listed += [(run.run_id, run.name, run.status) for run in items]
            if cursor is None:
                break
        cursor = None
        while True:
            page = api.list_runs(**filters, limit=4, cursor=cursor)
            expected += [(run.run_id, run.name, run.status) for run in page.items]
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
        assert listed == expected and expected, filters
