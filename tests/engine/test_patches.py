"""ctx.patched() and ctx.deprecated_patch() across deploys, divergence detection, and STRICT_REPLAY."""

import logging

import pytest

from durable_django import api
from durable_django.testing import make_due, run_until_idle
from tests.helpers import sql

pytestmark = pytest.mark.django_db(transaction=True)

MARKER = "v1:@patch:rename-second:0"


def journal(run_id):
    return dict(sql("SELECT step_id, result::text FROM durable_step WHERE run_id = %s", [run_id]))


def divergences(run_id):
    return sql("SELECT attempt, step_id, unasked::text FROM durable_replay_divergence WHERE run_id = %s", [run_id])


def sleeping_on_old_code(monkeypatch):
    """A run the old code took past the second step, asleep: the deploy comes while it waits."""
    monkeypatch.setenv("DURABLE_TEST_CODE", "old")
    run = api.enqueue("tests.changing", {"nap": 3600})
    run_until_idle()
    assert api.get_run(run.run_id).status == "waiting"
    return run.run_id


def finish(run_id):
    make_due(run_id)
    run_until_idle()
    return api.get_run(run_id)


def test_a_run_that_passed_the_point_before_the_patch_keeps_the_old_path(monkeypatch, caplog):
    run_id = sleeping_on_old_code(monkeypatch)
    monkeypatch.setenv("DURABLE_TEST_CODE", "patched")
    with caplog.at_level(logging.WARNING, logger="durable_django.replay"):
        done = finish(run_id)
    assert done.status == "succeeded" and done.output == ["one", "two", "three"]
    assert journal(run_id)[MARKER] == "false" and divergences(run_id) == [] and not caplog.records


def test_a_new_run_takes_the_patched_path_and_a_replay_gives_the_same_answer(monkeypatch):
    monkeypatch.setenv("DURABLE_TEST_CODE", "patched")
    run = api.enqueue("tests.changing", {"nap": 3600})
    run_until_idle()
    assert journal(run.run_id)[MARKER] == "true"
    done = finish(run.run_id)  # the replay after the sleep asks again
    assert done.output == ["one", "renamed", "three"] and divergences(run.run_id) == []
    assert journal(run.run_id)[MARKER] == "true"


def test_deprecating_the_patch_replays_runs_that_journalled_it_without_a_divergence(monkeypatch):
    monkeypatch.setenv("DURABLE_TEST_CODE", "patched")
    run = api.enqueue("tests.changing", {"nap": 3600})
    run_until_idle()
    monkeypatch.setenv("DURABLE_TEST_CODE", "deprecated")
    assert finish(run.run_id).output == ["one", "renamed", "three"]
    assert divergences(run.run_id) == []


def test_changed_code_without_a_patch_is_a_divergence_logged_and_recorded_once_per_attempt(monkeypatch, caplog):
    run_id = sleeping_on_old_code(monkeypatch)
    monkeypatch.setenv("DURABLE_TEST_CODE", "changed")
    with caplog.at_level(logging.WARNING, logger="durable_django.replay"):
        done = finish(run_id)
    assert done.status == "succeeded" and done.output == ["one", "renamed", "three"]
    [(_attempt, step_id, unasked)] = divergences(run_id)
    assert step_id == "v1:second-renamed:0" and "v1:second:0" in unasked and "v1:nap:0" in unasked
    [record] = caplog.records
    assert run_id in record.getMessage() and "the code changed under the run" in record.getMessage()


def test_strict_replay_fails_the_attempt_with_non_deterministic_replay_and_retries_it(monkeypatch, settings):
    run_id = sleeping_on_old_code(monkeypatch)
    monkeypatch.setenv("DURABLE_TEST_CODE", "changed")
    settings.DURABLE = {**settings.DURABLE, "STRICT_REPLAY": True}
    make_due(run_id)
    with pytest.raises(RuntimeError, match="still claimable"):  # the retry is due at once: one attempt only
        run_until_idle(max_runs=1)
    retried = api.get_run(run_id)
    assert retried.status == "pending" and "NonDeterministicReplay" in (retried.error_type or retried.error or "")
    assert "v1:second-renamed:0" not in journal(run_id)  # the step did not execute
    assert len(divergences(run_id)) == 1


def test_patched_in_an_async_handler_is_journalled(monkeypatch):
    run = api.enqueue("tests.async_patched")
    run_until_idle()
    assert api.get_run(run.run_id).output == ["one", True, True]
    assert journal(run.run_id)["v1:@patch:async-patch:0"] == "true"


def test_the_run_page_marks_a_diverged_run(monkeypatch, admin_client):
    run_id = sleeping_on_old_code(monkeypatch)
    page = f"/admin/durable_django/run/{run_id}/change/"
    assert "Replay diverged" not in admin_client.get(page).content.decode()
    monkeypatch.setenv("DURABLE_TEST_CODE", "changed")
    finish(run_id)
    html = admin_client.get(page).content.decode()
    assert "Replay diverged" in html and "<code>v1:second-renamed:0</code>" in html


def test_purging_a_diverged_run_removes_its_divergence_records(monkeypatch):
    run_id = sleeping_on_old_code(monkeypatch)
    monkeypatch.setenv("DURABLE_TEST_CODE", "changed")
    finish(run_id)
    assert len(divergences(run_id)) == 1
    assert api.purge_finished(older_than=0) == 1
    assert divergences(run_id) == []
