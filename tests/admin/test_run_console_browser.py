"""The run page for an operator, in headless Chromium: the timeline chart's bars of each kind, the attempts
with the selected one's traceback, the live refresh that shows a step landing without a reload, and
parked runs in the listing."""

import re
import threading

import pytest
from django.db import connections

from durable_django import api
from durable_django.engine import lifecycle
from durable_django.engine.attempt_state import Outcome
from durable_django.engine.execute import execute
from durable_django.testing import make_due, run_until_idle
from tests.admin.test_admin_browser import chromium, page, shoot  # noqa: F401 - the browser fixtures
from tests.workflows import effects

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

BOUNDS = lifecycle.claim_bounds(functions=None, queues=None, tenant_id=None)


def tour():
    """A run with a failed attempt, steps, a sleep and a child, finished."""
    run = api.enqueue("tests.console_tour", {})
    run_until_idle()  # attempt 1: the step, then it fails; attempt 2 (no delay): the sleep
    make_due(run.run_id)
    run_until_idle()  # attempt 3 spawns the child and waits; the child runs; attempt 4 finishes
    run_until_idle()
    assert api.get_run(run.run_id).status == "succeeded"
    return run


def test_the_timeline_chart_draws_each_kind_and_the_attempts_show_the_selected_traceback(page, shoot):  # noqa: F811
    run = tour()
    page.set_viewport_size({"width": 1400, "height": 900})
    page.goto(f"/admin/durable_django/run/{run.run_id}/change/")
    bars = page.locator("#durable-chart g.durable-bar")
    kinds = bars.evaluate_all("bars => bars.map(bar => bar.dataset.kind)")
    assert {"attempt", "step", "wait", "child"} <= set(kinds), kinds
    labels = bars.evaluate_all("bars => bars.map(bar => bar.dataset.label)")
    assert "attempt 1: retrying" in labels and "step fetch" in labels and "step finish" in labels
    assert "waits: sleep" in labels and any(label.startswith("child tests.noop") for label in labels)
    # Every bar lies on the chart, on one axis, readable at 1400 px.
    chart = page.locator("svg.durable-chart").bounding_box()
    assert chart["width"] <= 1400
    for box in (bar.locator("rect").bounding_box() for bar in bars.all()):
        assert chart["x"] <= box["x"] and box["x"] + box["width"] <= chart["x"] + chart["width"] + 1
    outcomes = page.locator("#durable-attempts tr.durable-attempt").evaluate_all(
        "rows => rows.map(row => row.dataset.outcome)"
    )
    assert outcomes == ["retrying", "suspended", "suspended", "succeeded"]
    # The failed attempt's traceback is shown, selected by default and by ?attempt=1.
    assert "the first attempt fails after its step" in page.locator("#durable-attempt-traceback").inner_text()
    page.goto(f"/admin/durable_django/run/{run.run_id}/change/?attempt=1#durable-attempts")
    assert page.locator("tr.durable-attempt-selected").get_attribute("data-number") == "1"
    assert "RuntimeError" in page.locator("#durable-attempt-traceback").inner_text()
    assert page.locator("#durable-live").get_attribute("data-live") == "false"
    shoot(page, "run-page-timeline-chart")


def test_the_live_part_of_a_running_runs_page_shows_a_step_that_lands_without_a_reload(page, shoot):  # noqa: F811
    run = api.enqueue("tests.gated_steps", {})
    [attempt] = lifecycle.claim(limit=1, start_now=1, worker_id="browser-test", bounds=BOUNDS)
    outcome = []

    def work():
        try:
            outcome.append(execute(attempt))
        finally:
            connections.close_all()

    worker = threading.Thread(target=work)
    worker.start()
    try:
        page.set_viewport_size({"width": 1400, "height": 900})
        page.goto(f"/admin/durable_django/run/{run.run_id}/change/")
        page.wait_for_selector("#durable-chart g.durable-bar[data-label='step one']")
        live = page.locator("#durable-live")
        assert live.get_attribute("data-live") == "true"
        assert page.locator("#durable-chart g.durable-bar[data-label='step two']").count() == 0
        page.evaluate("window.durableNotReloaded = true")
        effects.touch("gate")  # the second step returns, is journalled, and the run lands
        page.wait_for_selector("#durable-chart g.durable-bar[data-label='step two']")
        page.wait_for_function("document.getElementById('durable-live').dataset.live === 'false'")
    finally:
        effects.touch("gate")
        worker.join(timeout=30)
    assert outcome == [Outcome.SUCCEEDED]
    # The same page, never reloaded, now shows the landed step and the run's end, and stopped refreshing.
    assert page.evaluate("window.durableNotReloaded") is True
    assert int(live.get_attribute("data-refreshes")) >= 1 and live.get_attribute("data-status") == "succeeded"
    assert page.locator("#durable-attempts tr.durable-attempt").evaluate_all(
        "rows => rows.map(row => row.dataset.outcome)"
    ) == ["succeeded"]
    assert "The run has finished (succeeded)" in page.locator(".durable-live-finished").inner_text()
    refreshes = live.get_attribute("data-refreshes")
    page.wait_for_timeout(4500)
    assert live.get_attribute("data-refreshes") == refreshes  # stopped once the run finished
    shoot(page, "run-page-live")


def test_parked_runs_have_a_filter_an_overview_card_and_a_resume_button(page, shoot):  # noqa: F811
    parked = api.enqueue("tests.parks", {"succeed_on": 99})
    api.enqueue("tests.noop", {})
    run_until_idle()
    page.set_viewport_size({"width": 1400, "height": 900})
    page.goto("/admin/durable_django/run/")
    card = page.locator(".durable-overview-parked")
    assert card.locator(".durable-overview-total").inner_text() == "1"
    card.get_by_role("link").click()
    page.wait_for_url(re.compile(r"parked=yes"))
    assert page.locator("#result_list input[name=_selected_action]").evaluate_all(
        "boxes => boxes.map(box => box.value)"
    ) == [parked.run_id]
    shoot(page, "runs-parked")
    page.goto(f"/admin/durable_django/run/{parked.run_id}/change/")
    assert page.get_by_role("link", name="Resume", exact=True).count() == 1
    bars = page.locator("#durable-chart g.durable-bar").evaluate_all("bars => bars.map(bar => bar.dataset.label)")
    assert "parked: waits for an operator" in bars
