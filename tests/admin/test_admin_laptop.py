"""The admin at a laptop's window (1400 x 900, Django's navigation sidebar open as it starts), in headless
Chromium: every listing shows all its columns without scrolling sideways, and a failed run's error is on
the first screen of its page."""

import re

import pytest

from durable_django import api
from durable_django.api import schedules as schedules_api
from durable_django.engine import lifecycle
from tests.admin.conftest import TENANT
from tests.admin.test_admin_browser import TIMEOUT_MS, chromium  # noqa: F401 - the browser fixture

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

WIDTH, HEIGHT = 1400, 900

# Where each column header of the listing lies, and how wide the page and the table's box are drawn.
LAYOUT = """() => {
  const results = document.querySelector('#changelist .results');
  return {
    pageWidth: document.documentElement.scrollWidth,
    tableWidth: results ? results.scrollWidth : 0,
    tableBox: results ? results.clientWidth : 0,
    headers: [...document.querySelectorAll('#result_list thead th')].map(th => {
      const box = th.getBoundingClientRect();
      return {name: th.className || th.innerText, left: box.left, right: box.right};
    }),
  };
}"""


@pytest.fixture
def laptop(chromium, live_server, admin_user):  # noqa: F811
    """A logged-in tab at a laptop's size, with the navigation sidebar as Django opens it (open)."""
    context = chromium.new_context(viewport={"width": WIDTH, "height": HEIGHT}, base_url=live_server.url)
    context.set_default_timeout(TIMEOUT_MS)
    tab = context.new_page()
    tab.goto("/admin/login/?next=/admin/durable_django/run/")
    tab.fill("#id_username", admin_user.username)
    tab.fill("#id_password", "password")
    tab.click("input[type=submit]")
    tab.wait_for_url(re.compile(r"/admin/durable_django/run/$"))
    assert tab.locator("#nav-sidebar").is_visible()
    yield tab
    context.close()


def assert_fits(tab, columns: int) -> None:
    layout = tab.evaluate(LAYOUT)
    headers = layout["headers"]
    off_screen = [header["name"] for header in headers if header["left"] < 0 or header["right"] > WIDTH]
    assert not off_screen, f"{tab.url}: columns past the window's {WIDTH} px: {off_screen} ({headers})"
    assert layout["pageWidth"] <= WIDTH, layout
    # Django wraps the table in a box that scrolls sideways itself: it must not need to.
    assert layout["tableWidth"] <= layout["tableBox"], layout
    assert len(headers) == columns, headers


def test_the_runs_listing_shows_every_column_without_scrolling_sideways(example_runs, laptop):
    laptop.goto("/admin/durable_django/run/")
    assert_fits(laptop, columns=8)  # the selection box and seven columns
    # Short ids, each linking to the run's page by its whole id, which its title shows too.
    href = f"a[href$='/run/{example_runs.failed}/change/']"
    link = laptop.locator(f"#result_list {href}")
    assert link.inner_text() == example_runs.failed[:8] + "…"
    assert link.locator("span").get_attribute("title") == example_runs.failed
    row = laptop.locator("#result_list tbody tr", has=laptop.locator(href))
    assert row.locator(".field-claims").inner_text() == "3 claims, failed 3"
    assert row.locator(".field-colored_status").inner_text() == "Failed"


def test_a_failed_runs_error_starts_on_the_first_screen_of_its_page(example_runs, laptop):
    laptop.goto(f"/admin/durable_django/run/{example_runs.failed}/change/")
    error = laptop.locator("#durable-error")
    assert error.bounding_box()["y"] < HEIGHT
    assert laptop.locator("#durable-error .durable-error-message").inner_text() == "KeyError: 'broken on purpose'"
    traceback = laptop.locator("#durable-error .durable-traceback")
    assert traceback.bounding_box()["y"] < HEIGHT - 100  # its first lines are on the screen, not just its edge
    assert "Traceback (most recent call last)" in traceback.inner_text()
    assert laptop.evaluate("document.documentElement.scrollWidth") <= WIDTH


def test_the_schedules_workers_and_pauses_listings_show_every_column_without_scrolling_sideways(laptop):
    schedules_api.schedule(
        "nightly-customer-report-for-finance", "tests.noop", "30 2 * * 1-5", tz="America/Argentina/Buenos_Aires"
    )
    schedules_api.schedule("hourly-greet", "tests.noop", "0 * * * *", tenant_id=TENANT, enabled=False)
    # A worker that registers every function and claims from several queues: its cells are the widest.
    identity = lifecycle.worker_identity(
        worker_id="web-worker-7.prod.example.com:4242:0f3a9c1e",
        functions=None,
        queues=["emails", "billing", "reports"],
        tenant_id=None,
        concurrency=16,
    )
    lifecycle.worker_started(identity)
    api.pause(function="tests.noop", reason="the mail provider is down; resume when their status page is green")
    for listing, columns in (("schedule", 8), ("worker", 10), ("pause", 6)):
        laptop.goto(f"/admin/durable_django/{listing}/")
        assert laptop.locator("#result_list tbody tr").count() >= 1
        assert_fits(laptop, columns)
