"""An operator's clicks through the admin, in headless Chromium driven by Playwright.

Chromium is Debian's ``chromium`` package (CI's script installs it) and
Playwright comes from the ``browser`` extra. Without either, these tests skip
with the reason, except in CI (``CI`` set), where they fail.

Each page visited is saved as a PNG: under ``docs/screenshots/`` when
``DURABLE_SCREENSHOTS`` is set (that is how the README's pictures are made),
otherwise in the test's temporary directory.
"""

import os
import re
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from durable_django import api
from durable_django.api import schedules as schedules_api
from tests.admin.conftest import status_of
from tests.helpers import ROOT

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
# Generous against a shared two-core machine; a page normally answers in well under a second.
TIMEOUT_MS = 30_000
# Where a test that moves the page's clock starts it.
START = datetime(2026, 1, 1, tzinfo=UTC)


def unavailable(reason: str):
    if os.environ.get("CI"):
        pytest.fail(f"{reason}; CI must run the browser tests")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def chromium():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        unavailable("playwright is not installed (pip install --group browser)")
    executable = shutil.which("chromium") or shutil.which("chromium-browser")
    if executable is None:
        unavailable("no chromium executable on PATH (apt-get install chromium)")
    # Playwright's sync API keeps an event loop in this thread while it lives. The ORM calls
    # the tests make between clicks (and the database flush after each) are still plain
    # blocking calls on this thread, so Django is told to allow them while the browser is up.
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
            yield browser
            browser.close()


@pytest.fixture
def page(chromium, live_server, admin_user):
    context = chromium.new_context(viewport={"width": 1600, "height": 900}, base_url=live_server.url)
    context.set_default_timeout(TIMEOUT_MS)
    # Django's navigation sidebar starts folded, so the pages (and their pictures) get the width.
    context.add_init_script("window.localStorage.setItem('django.admin.navSidebarIsOpen', 'false')")
    tab = context.new_page()
    tab.goto("/admin/login/?next=/admin/durable_django/run/")
    tab.fill("#id_username", admin_user.username)
    tab.fill("#id_password", "password")
    tab.click("input[type=submit]")
    tab.wait_for_url(re.compile(r"/admin/durable_django/run/$"))
    yield tab
    context.close()


@pytest.fixture
def shoot(tmp_path):
    directory = Path(ROOT) / "docs" / "screenshots" if os.environ.get("DURABLE_SCREENSHOTS") else tmp_path
    directory.mkdir(parents=True, exist_ok=True)

    def save(tab, name: str) -> Path:
        path = directory / f"{name}.png"
        tab.screenshot(path=str(path), full_page=True)
        assert path.stat().st_size > 10_000, f"{path} looks empty"
        return path

    return save


def row_ids(tab) -> list[str]:
    return tab.locator("#result_list input[name=_selected_action]").evaluate_all("boxes => boxes.map(box => box.value)")


def test_filter_open_a_run_see_its_steps_and_cancel_it(example_runs, page, shoot):
    assert page.locator(".durable-overview").is_visible()
    assert len(row_ids(page)) == 9
    shoot(page, "runs-changelist")

    page.locator("#changelist-filter").get_by_role("link", name="Waiting", exact=True).click()
    page.wait_for_url(re.compile(r"status__exact=waiting"))
    assert sorted(row_ids(page)) == sorted([example_runs.waiting, example_runs.parent, example_runs.child])
    assert page.locator("#result_list .durable-status").all_inner_texts() == ["Waiting"] * 3
    shoot(page, "runs-filtered-by-status")

    page.goto("/admin/durable_django/run/?function=tests.two_steps")
    page.locator(f"#result_list a[href*='/run/{example_runs.succeeded}/change/']").click()
    page.wait_for_url(re.compile(rf"/run/{example_runs.succeeded}/change/"))
    journal = page.locator("#durable-journal tr.durable-step")
    assert journal.count() == 2
    assert [row.get_attribute("data-step-id") for row in journal.all()] == ["v1:first:0", "v1:second:0"]
    assert '"one"' in journal.nth(0).inner_text() and '"two"' in journal.nth(1).inner_text()
    assert '"two"' in page.locator("#durable-output").inner_text()
    shoot(page, "run-page-with-journal")

    page.goto(f"/admin/durable_django/run/{example_runs.waiting}/change/")
    page.get_by_role("link", name="Cancel", exact=True).click()
    page.wait_for_url(re.compile(rf"/run/{example_runs.waiting}/cancel/$"))
    assert page.locator(".durable-targets").inner_text().count(example_runs.waiting) == 1
    assert status_of(example_runs.waiting) == "waiting"
    shoot(page, "run-cancel-confirmation")

    page.get_by_role("button", name="Yes, cancel").click()
    page.wait_for_url(re.compile(rf"/run/{example_runs.waiting}/change/$"))
    assert "Cancel: cancelled" in page.locator(".messagelist").inner_text()
    assert page.locator(".field-colored_status .durable-status").inner_text() == "Cancelled"
    assert status_of(example_runs.waiting) == "cancelled"
    shoot(page, "run-cancelled")


def test_bulk_cancel_shows_each_outcome(example_runs, page, shoot):
    chosen = {example_runs.waiting: "cancelled", example_runs.running: "requested", example_runs.succeeded: "refused"}
    for run_id in chosen:
        page.check(f"#result_list input[name=_selected_action][value='{run_id}']")
    page.select_option("select[name=action]", "cancel_runs")
    page.click("button[name=index], input[name=index]")
    page.wait_for_selector(".durable-confirm-form")
    assert page.locator(".durable-targets tr").count() == 3
    shoot(page, "runs-bulk-cancel-confirmation")

    page.get_by_role("button", name="Yes, cancel").click()
    page.wait_for_selector(".durable-outcomes-table")
    for run_id, label in chosen.items():
        assert page.locator(f"tr[data-target='{run_id}'] .durable-outcome-label").inner_text() == label
    shoot(page, "runs-bulk-cancel-outcomes")
    assert api.get_run(example_runs.running).cancel_requested_at is not None


def test_a_failed_run_shows_its_traceback_and_a_waiting_run_takes_a_signal(example_runs, page, shoot):
    page.goto(f"/admin/durable_django/run/{example_runs.failed}/change/")
    traceback = page.locator("#durable-error .durable-traceback").inner_text()
    assert traceback.startswith("Traceback (most recent call last):") and "KeyError" in traceback
    shoot(page, "run-failed-with-traceback")

    page.goto(f"/admin/durable_django/run/{example_runs.waiting}/change/")
    page.get_by_role("link", name="Send a signal").click()
    page.wait_for_url(re.compile(rf"/run/{example_runs.waiting}/signal/$"))
    assert page.input_value("#id_signal") == "approval"
    page.fill("#id_value", '{"approved": true}')
    shoot(page, "run-signal-form")
    page.get_by_role("button", name="Yes, send a signal").click()
    page.wait_for_url(re.compile(rf"/run/{example_runs.waiting}/change/$"))
    assert "signal stored" in page.locator(".messagelist").inner_text()
    assert status_of(example_runs.waiting) == "pending"


def test_schedules_listing_and_form_validation(page, shoot, transactional_db):
    schedules_api.schedule("nightly-report", "tests.noop", "30 2 * * *", tz="Europe/Berlin", input={"report": 1})
    schedules_api.schedule("hourly-sync", "tests.two_steps", "0 * * * *", tz="America/New_York", enabled=False)
    page.goto("/admin/durable_django/schedule/")
    listing = page.locator("#result_list").inner_text()
    assert "02:30:00" in listing and "Europe/Berlin" in listing and "—, disabled" in listing
    shoot(page, "schedules-changelist")

    page.goto("/admin/durable_django/schedule/add/")
    page.fill("#id_key", "broken")
    page.select_option("#id_name", "tests.noop")
    page.fill("#id_cron", "61 * * * *")
    # Zones are offered from a list (a zone typed past it is a form error: tests/admin/test_admin_schedule_page.py).
    page.select_option("#id_tz", "Europe/Berlin")
    page.click("[name=_save]")
    page.wait_for_selector(".errornote")
    errors = page.locator(".errorlist").all_inner_texts()
    assert any("invalid cron expression" in error for error in errors)
    assert schedules_api.get_schedule("broken") is None
    shoot(page, "schedule-form-validation")


def test_a_schedules_page_reads_its_cron_and_backfills_after_a_confirmation(page, shoot, transactional_db):
    from datetime import timedelta

    from tests.helpers import sql

    schedules_api.schedule("hourly-sync", "tests.noop", "0 * * * *", tz="Europe/Berlin", overlap="skip")
    page.goto("/admin/durable_django/schedule/hourly-sync/change/")
    assert "every hour" in page.locator(".durable-cron-words").inner_text()
    assert page.locator(".durable-next-fires li").count() == 5
    shoot(page, "schedule-page")
    page.click(".durable-operation-backfill")
    now = sql("SELECT now() AT TIME ZONE 'Europe/Berlin'")[0][0].replace(minute=0, second=0, microsecond=0)
    page.fill("#id_start", f"{now - timedelta(hours=3):%Y-%m-%d %H:%M}")
    page.fill("#id_end", f"{now:%Y-%m-%d %H:%M}")
    page.click("input[type=submit]")
    assert "This fires 3 ticks" in page.locator(".durable-backfill-confirm").inner_text()
    page.click("input[type=submit]")
    page.wait_for_selector(".messagelist")
    # Under "skip" the first tick's run is still pending, so the two after it make none.
    assert "Backfill made 1 run for 3 ticks" in page.locator(".messagelist").inner_text()
    assert page.locator(".durable-last-runs tbody tr").count() == 1
    shoot(page, "schedule-backfilled")


def test_auto_refresh_lets_an_operator_watch_a_runs_progress(page, shoot, transactional_db):
    from durable_django.engine import lifecycle
    from durable_django.engine.context import Context

    run = api.enqueue("tests.slow", {"seconds": 60})
    bounds = lifecycle.claim_bounds(functions=["tests.slow"], queues=None, tenant_id=None)
    [attempt] = lifecycle.claim(limit=1, start_now=1, worker_id="browser-tests:1", bounds=bounds)
    ctx = Context(attempt)
    # The page's timers run on a clock the test moves, paused in between: its interval is what is tested,
    # not the wall time (a running clock reloaded the page once more in the middle of a later navigation).
    page.clock.install(time=START)
    page.clock.pause_at(START + timedelta(seconds=1))
    page.goto(f"/admin/durable_django/run/{run.run_id}/change/")
    toggle = page.locator("#durable-autorefresh")
    assert not toggle.is_checked() and page.locator("#durable-progress").count() == 0
    toggle.check()
    ctx.set_progress({"done": 1, "total": 3})
    # The page reloads itself (every 5 seconds) and shows what the handler reported since.
    assert toggle.get_attribute("data-seconds") == "5"
    page.clock.run_for(5_000)
    page.wait_for_selector("#durable-progress")
    assert '"done": 1' in page.locator("#durable-progress").inner_text()
    assert page.locator("#durable-autorefresh").is_checked()  # remembered across the reload
    shoot(page, "run-page-with-progress")
    # The listing (tests/admin/test_admin_observability.py shows its progress column) remembers the choice.
    page.goto("/admin/durable_django/run/")
    assert page.locator("#durable-autorefresh").is_checked()
    page.locator("#durable-autorefresh").uncheck()
    api.cancel(run.run_id)
