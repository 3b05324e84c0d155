"""The Django signals of durable_django.signals: sent once per event, after commit, with Run as sender;
a receiver that raises is logged and changes nothing."""

import logging

import pytest
from django.db import transaction

from durable_django import CancelOutcome, Run, api, signals
from durable_django.testing import make_due, run_until_idle

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def received():
    """Every signal of the package received, in order, as (signal name, keyword arguments)."""
    events = []
    receivers = {}
    for name in ("run_enqueued", "attempt_started", "attempt_finished", "run_finished"):

        def receiver(sender, name=name, **kwargs):
            assert sender is Run
            kwargs.pop("signal")
            events.append((name, kwargs))

        receivers[name] = receiver
        getattr(signals, name).connect(receiver, sender=Run)
    yield events
    for name, receiver in receivers.items():
        getattr(signals, name).disconnect(receiver, sender=Run)


def test_a_run_enqueued_in_a_transaction_is_reported_at_commit_and_a_rolled_back_one_never(received):
    with transaction.atomic():
        kept = api.enqueue("tests.noop", {"n": 1})
        assert received == []
    with pytest.raises(RuntimeError), transaction.atomic():
        api.enqueue("tests.noop", {"n": 2})
        raise RuntimeError("roll back")
    assert [(name, kwargs["run"].run_id) for name, kwargs in received] == [("run_enqueued", kept.run_id)]


def test_a_key_that_joins_an_existing_run_reports_nothing(received):
    first = api.enqueue("tests.noop", {"n": 1}, idempotency_key="once")
    joined = api.enqueue("tests.noop", {"n": 2}, idempotency_key="once")
    assert joined.run_id == first.run_id
    many = api.enqueue_many("tests.noop", [{"n": 3}, {"n": 4}], idempotency_keys=["once", "twice"])
    assert [kwargs["run"].run_id for _, kwargs in received] == [first.run_id, many[1].run_id]


def test_a_run_that_succeeds_reports_its_attempt_and_its_end_with_the_run_read_back(received):
    run = api.enqueue("tests.noop", {"n": 1})
    run_until_idle()
    names = [name for name, _ in received]
    assert names == ["run_enqueued", "attempt_started", "attempt_finished", "run_finished"]
    started, finished, ended = (kwargs for _, kwargs in received[1:])
    assert started["attempt"] == 1 and started["run"].run_id == run.run_id
    assert finished["attempt"] == 1 and finished["outcome"] == "succeeded"
    assert ended["run"].status == "succeeded" and ended["run"].output == {"n": 1}


def test_a_retried_attempt_reports_retrying_and_the_run_finishes_once(received):
    run = api.enqueue("tests.flaky", {"succeed_on": 2})
    run_until_idle()
    make_due(run.run_id)
    run_until_idle()
    outcomes = [(kwargs["attempt"], kwargs["outcome"]) for name, kwargs in received if name == "attempt_finished"]
    assert outcomes == [(1, "retrying"), (2, "succeeded")]
    assert [kwargs["run"].status for name, kwargs in received if name == "run_finished"] == ["succeeded"]


def test_cancelling_a_pending_run_reports_it_finished(received):
    run = api.enqueue("tests.noop", {"n": 1})
    assert api.cancel(run.run_id) == CancelOutcome.CANCELLED
    assert [(name, kwargs["run"].status) for name, kwargs in received][-1] == ("run_finished", "cancelled")


def test_a_receiver_that_raises_is_logged_and_the_run_is_unchanged(received, caplog):
    def broken(sender, **kwargs):
        raise ValueError("receiver broke")

    signals.attempt_finished.connect(broken, sender=Run)
    try:
        with caplog.at_level(logging.ERROR, logger="durable_django.signals"):
            run = api.enqueue("tests.noop", {"n": 1})
            run_until_idle()
    finally:
        signals.attempt_finished.disconnect(broken, sender=Run)
    assert api.get_run(run.run_id).status == "succeeded"
    assert "run_finished" in [name for name, _ in received]  # the other receivers still ran
    assert any("receiver broke" in (record.exc_text or "") or record.exc_info for record in caplog.records)
