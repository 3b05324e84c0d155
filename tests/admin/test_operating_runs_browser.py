"""The operator's controls in headless Chromium, clicked as an operator clicks them: pause a function and
unpause it, fork a failed run from a step, and cancel every run a filter matches. Their pictures illustrate
docs/operator-control.md."""

import os
import re

import pytest

from durable_django import api
from durable_django.api.bulk import BULK_FUNCTION
from durable_django.testing import run_until_idle
from tests.admin.test_admin_browser import chromium, page, row_ids, shoot  # noqa: F401 - the browser fixtures
from tests.workflows import effects

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_an_operator_pauses_a_function_its_runs_wait_and_unpausing_lets_them_run(page, shoot):  # noqa: F811
    page.goto("/admin/durable_django/pause/add/")
    page.fill("#id_function", "tests.noop")
    page.fill("#id_reason", "the CRM is down")
    page.click("input[name=_save]")
    page.wait_for_url(re.compile(r"/admin/durable_django/pause/$"))
    assert row_ids(page) == ["paused:function:tests.noop"]
    assert "the CRM is down" in page.locator("#result_list").inner_text()
    run = api.enqueue("tests.noop", {})
    run_until_idle()
    assert api.get_run(run.run_id).status == "pending"  # paused: claimed by nobody
    shoot(page, "pauses-listing")

    page.check("#result_list input[name=_selected_action][value='paused:function:tests.noop']")
    page.select_option("select[name=action]", "unpause_selected")
    page.click("button[name=index], input[name=index]")
    page.wait_for_url(re.compile(r"/admin/durable_django/pause/$"))
    assert row_ids(page) == [] and api.list_pauses() == []
    run_until_idle()
    assert api.get_run(run.run_id).status == "succeeded"


def test_an_operator_forks_a_failed_run_from_a_step_of_its_journal(page, shoot):  # noqa: F811
    effects.touch("forkable-c-broken")
    failed = api.enqueue("tests.forkable", {"n": 1}, version=1)
    run_until_idle()
    os.remove(effects._path("forkable-c-broken"))
    assert api.get_run(failed.run_id).status == "failed"
    page.goto(f"/admin/durable_django/run/{failed.run_id}/change/")
    page.locator("a.durable-fork-from[href$='from_step=b']").click()
    page.wait_for_selector(".durable-confirm-form")
    assert page.locator("input[name=from_step]").input_value() == "b"
    shoot(page, "run-fork-confirmation")

    page.locator(".durable-confirm-form button[type=submit], .durable-confirm-form input[type=submit]").first.click()
    page.wait_for_url(re.compile(r"/admin/durable_django/run/(?!" + failed.run_id + r")[^/]+/change/$"))
    fork_id = page.url.rstrip("/").split("/")[-2]
    assert api.get_run(fork_id).forked_from == {"run_id": failed.run_id, "step": "b"}
    assert "Forked from run" in page.locator("#content").inner_text()
    run_until_idle()
    # The copied steps (a) are not run again; b and what follows are, now that c works.
    assert api.get_run(fork_id).status == "succeeded"
    page.reload()
    shoot(page, "run-forked")


def test_an_operator_cancels_every_run_a_filter_matches_and_watches_the_bulk_run(page, shoot):  # noqa: F811
    api.enqueue_many("tests.noop", [{"n": n} for n in range(120)])
    kept = api.enqueue("tests.slow", {"seconds": 0})
    page.goto("/admin/durable_django/run/?status__exact=pending&function=tests.noop")
    page.check("#action-toggle")
    page.locator(".actions .question a, .actions a.select-across").first.click()
    page.select_option("select[name=action]", "cancel_runs")
    page.click("button[name=index], input[name=index]")
    page.wait_for_selector(".durable-confirm-form")
    assert "every run matching" in page.locator("#content").inner_text()
    shoot(page, "runs-bulk-by-filter-confirmation")

    page.locator(".durable-confirm-form button[type=submit], .durable-confirm-form input[type=submit]").first.click()
    page.wait_for_url(re.compile(r"/admin/durable_django/run/[^/]+/change/$"))
    bulk_id = page.url.rstrip("/").split("/")[-2]
    assert api.get_run(bulk_id).name == BULK_FUNCTION
    run_until_idle(functions=[BULK_FUNCTION])
    done = api.get_run(bulk_id)
    assert done.output == {"operation": "cancel", "runs": 120, "outcomes": {"cancelled": 120}}
    assert api.get_run(kept.run_id).status == "pending"
    page.reload()
    assert '"runs": 120' in page.locator("#content").inner_text()
    shoot(page, "bulk-run-progress")
