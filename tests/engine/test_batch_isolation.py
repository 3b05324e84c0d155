"""A batch one member cannot spoil: every write the worker shares between runs (starts, step records,
renewals, releases, landings) that fails for a reason other than a lost connection is written again
member by member, and only the member the database refuses gets an error."""

import psycopg
import pytest
from django.db import DataError

from durable_django.engine import batching, lifecycle
from durable_django.store import journal
from tests.engine.test_batching import asked_while_a_connection_is_held, engine_pool, started_at, stored_steps
from tests.helpers import sql
from tests.store.factories import enqueue_many

pytestmark = pytest.mark.django_db(transaction=True)

__all__ = ["engine_pool"]  # the fixture, used by the tests below

POISONED = 5
# No fence token fits PostgreSQL's integer: a statement carrying it is refused.
UNFIT_TOKEN = 2**40


def attempts(count, *, started=None):
    enqueue_many(count)
    return lifecycle.claim(
        limit=count,
        start_now=count if started is None else started,
        worker_id="isolation",
        bounds=lifecycle.claim_bounds(functions=None, queues=None, tenant_id=None),
    )


def outcome_or_error(call, *args):
    try:
        return call(*args)
    except Exception as exc:  # noqa: BLE001 - the error is the outcome under test
        return exc


def test_steps_journalled_at_once_with_one_the_database_refuses_are_stored_and_only_that_one_fails(engine_pool):
    held = attempts(12)

    def record(index):
        value = f'"bad \\udcff {index}"' if index == POISONED else f'"good {index}"'
        return outcome_or_error(batching.record_step, held[index].run.run_id, held[index].token, "v1:s:0", value)

    recorded = asked_while_a_connection_is_held(engine_pool, batching._steps, 12, record)
    assert isinstance(recorded[POISONED], DataError)
    assert isinstance(recorded[POISONED].__cause__, psycopg.errors.InvalidTextRepresentation)
    for index, attempt in enumerate(held):
        if index != POISONED:
            assert recorded[index] == journal.Recorded(f"good {index}", False)
            assert stored_steps(attempt.run.run_id) == {"v1:s:0": f'"good {index}"'}
    assert stored_steps(held[POISONED].run.run_id) == {}


def test_starts_asked_at_once_with_one_the_database_refuses_start_the_others(engine_pool):
    held = attempts(12, started=0)
    tokens = [UNFIT_TOKEN if index == POISONED else attempt.token for index, attempt in enumerate(held)]
    started = asked_while_a_connection_is_held(
        engine_pool,
        batching._starts,
        12,
        lambda index: outcome_or_error(batching.start, held[index].run.run_id, tokens[index]),
    )
    assert isinstance(started[POISONED], DataError)
    assert [result for index, result in enumerate(started) if index != POISONED] == [False] * 11
    assert [started_at(attempt.run.run_id)[0] is not None for attempt in held].count(True) == 11


def test_a_renewal_the_database_refuses_leaves_that_run_unrenewed_and_renews_the_others():
    held = attempts(4)
    sql("UPDATE durable_run SET leased_until = now() + interval '1 second'")
    held[2].token = UNFIT_TOKEN
    renewals = lifecycle.renew(held)
    assert renewals[held[2].held] == lifecycle.Renewal(renewed=False, cancel_requested=False, held=True)
    assert all(renewals[attempt.held].renewed for index, attempt in enumerate(held) if index != 2)
    leases = dict(sql("SELECT run_id, leased_until > now() + interval '10 seconds' FROM durable_run"))
    assert leases == {attempt.run.run_id: index != 2 for index, attempt in enumerate(held)}


def test_a_release_the_database_refuses_leaves_that_run_held_and_releases_the_others():
    held = attempts(4)
    held[1].token = UNFIT_TOKEN
    assert lifecycle.release(held) == 3
    statuses = dict(sql("SELECT run_id, status FROM durable_run"))
    assert statuses == {
        attempt.run.run_id: "running" if index == 1 else "pending" for index, attempt in enumerate(held)
    }


def test_a_landing_batch_with_an_output_jsonb_refuses_fails_only_that_run():
    held = attempts(6)
    # A lone surrogate, as the JSON encoder writes it: jsonb refuses it.
    batch = [(attempt, '"bad \\udcff"' if index == POISONED else str(index)) for index, attempt in enumerate(held)]
    report = lifecycle.land_successes(batch)
    assert report.retry == []
    statuses = dict(sql("SELECT run_id, status FROM durable_run"))
    assert statuses == {
        attempt.run.run_id: "failed" if index == POISONED else "succeeded" for index, attempt in enumerate(held)
    }
    error_type = sql("SELECT error_type FROM durable_run WHERE run_id = %s", [held[POISONED].run.run_id])[0][0]
    assert error_type == "durable_django.exceptions.OutputNotStored"
