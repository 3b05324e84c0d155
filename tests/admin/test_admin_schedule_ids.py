"""Schedules in the admin by the id their caller chose: no stored tenant prefix in the listing, the links or
the titles (old links still answer), and a disabled schedule shows no next fire."""

import re
from datetime import timedelta

import pytest
from django.contrib.admin.utils import quote
from django.utils import timezone

from durable_django.api import schedules as schedules_api
from tests.admin.conftest import TENANT
from tests.helpers import sql

pytestmark = pytest.mark.django_db(transaction=True)

SCHEDULES = "/admin/durable_django/schedule/"


@pytest.fixture
def greets(transactional_db):
    """The same id untagged (stored ``:hourly-greet``) and in a tenant (stored ``{tenant}:hourly-greet``)."""
    schedules_api.schedule("hourly-greet", "tests.noop", "0 * * * *")
    schedules_api.schedule("hourly-greet", "tests.noop", "30 * * * *", tenant_id=TENANT)


def links(html: str) -> list[str]:
    return re.findall(r'<a href="(/admin/durable_django/schedule/[^"]*)"', html)


def test_the_listing_shows_each_schedules_own_id_its_tenant_apart_and_links_without_the_stored_prefix(
    greets, admin_client
):
    html = admin_client.get(SCHEDULES).content.decode()
    rows = html[html.index('id="result_list"') :]
    assert f"{SCHEDULES}hourly-greet/change/" in links(rows)
    assert f"{SCHEDULES}{quote(f'{TENANT}:hourly-greet')}/change/" in links(rows)
    # Only the selection boxes' values (which the actions post back) carry the stored ids.
    shown = re.sub(r'name="_selected_action" value="[^"]*"', "", rows)
    for leak in (">:hourly-greet", "/:hourly-greet", "/_3Ahourly-greet", "/%3Ahourly-greet"):
        assert leak not in shown
    assert f'<span class="durable-note durable-tenant" title="tenant {TENANT}">tenant {TENANT[:8]}…</span>' in rows
    # Each page answers at its address, for its own schedule.
    untagged = admin_client.get(f"{SCHEDULES}hourly-greet/change/")
    assert untagged.status_code == 200 and untagged.context["original"].cron == "0 * * * *"
    tenants = admin_client.get(f"{SCHEDULES}{quote(f'{TENANT}:hourly-greet')}/change/")
    assert tenants.status_code == 200 and tenants.context["original"].cron == "30 * * * *"
    # The title and breadcrumbs name the schedule by its own id too.
    page = untagged.content.decode()
    assert "hourly-greet (0 * * * *)" in page and ":hourly-greet" not in page.split('id="content"')[0]
    assert f"{SCHEDULES}hourly-greet/fire/" in page and f"{SCHEDULES}hourly-greet/backfill/" in page


@pytest.mark.parametrize("old", ["_3Ahourly-greet", "%3Ahourly-greet", ":hourly-greet"])
def test_an_old_link_with_the_stored_prefix_still_answers(greets, admin_client, old):
    response = admin_client.get(f"{SCHEDULES}{old}/change/?_changelist_filters=enabled%3D1")
    assert response.status_code == 302
    assert response["Location"] == f"{SCHEDULES}hourly-greet/change/?_changelist_filters=enabled%3D1"
    for view in ("history", "delete", "fire", "backfill"):
        assert admin_client.get(f"{SCHEDULES}{old}/{view}/").status_code == 200, view
        assert admin_client.get(f"{SCHEDULES}hourly-greet/{view}/").status_code == 200, view


def test_an_untagged_id_that_looks_stored_keeps_its_stored_address(admin_client, transactional_db):
    # Untagged ids that begin with a colon, or with a tenant's UUID and a colon, cannot drop the prefix:
    # their address would name another schedule.
    schedules_api.schedule(f"{TENANT}:nightly", "tests.noop", "0 3 * * *")
    schedules_api.schedule("nightly", "tests.noop", "0 4 * * *", tenant_id=TENANT)
    schedules_api.schedule(":odd", "tests.noop", "0 5 * * *")
    schedules_api.schedule("odd", "tests.noop", "0 6 * * *")
    html = admin_client.get(SCHEDULES).content.decode()
    found = {}
    for href in set(links(html[html.index('id="result_list"') :])):
        if href.endswith("/change/"):
            response = admin_client.get(href)
            assert response.status_code == 200, href
            found[response.context["original"].cron] = href
    assert found == {
        "0 3 * * *": f"{SCHEDULES}{quote(f':{TENANT}:nightly')}/change/",
        "0 4 * * *": f"{SCHEDULES}{quote(f'{TENANT}:nightly')}/change/",
        "0 5 * * *": f"{SCHEDULES}{quote('::odd')}/change/",
        "0 6 * * *": f"{SCHEDULES}odd/change/",
    }


def test_a_disabled_schedule_shows_no_next_fire(admin_client, transactional_db):
    schedules_api.schedule("nightly", "tests.noop", "30 2 * * *", tz="Europe/Berlin", enabled=False)
    # Disabled for a week: the next fire it kept has long passed.
    sql("UPDATE durable_schedule SET next_fire_at = now() - interval '7 days' WHERE schedule_id = ':nightly'")
    [stale] = sql("SELECT next_fire_at FROM durable_schedule")[0]
    listing = admin_client.get(SCHEDULES).content.decode()
    assert '<span class="durable-note durable-disabled">—, disabled</span>' in listing
    assert f"{stale:%Y-%m-%d}" not in listing.split('id="result_list"')[1].split("</table>")[0]
    response = admin_client.get(f"{SCHEDULES}nightly/change/")
    page = response.content.decode()
    assert '<p class="durable-note durable-next-fire">Next fire: —, disabled</p>' in page
    # The fire times it lists are those it would fire once enabled: from now on, never a passed one.
    fires = re.findall(r"<li>(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) CES?T</li>", page)
    assert len(fires) == 5
    now_in_berlin = timezone.now().astimezone(__import__("zoneinfo").ZoneInfo("Europe/Berlin"))
    assert min(fires) > f"{now_in_berlin:%Y-%m-%d %H:%M:%S}"
    assert min(fires) < f"{now_in_berlin + timedelta(days=1, hours=1):%Y-%m-%d %H:%M:%S}"
