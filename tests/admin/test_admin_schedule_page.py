"""The schedule's page: the cron in words, the next five fire times, its last runs, its policies, zones from a
list, and backfill (a range, a confirmation, the runs it made), permission-checked and never a 500."""

import re
from datetime import timedelta
from zoneinfo import ZoneInfo

import pytest
from django.contrib.admin.utils import quote

from durable_django.api import schedules as schedules_api
from durable_django.engine.cron import next_fire_after, parse
from durable_django.testing import run_until_idle
from tests.helpers import sql

SCHEDULES = "/admin/durable_django/schedule/"
BERLIN = ZoneInfo("Europe/Berlin")


def page(stored_id, suffix="change/"):
    """A schedule's page: an untagged one by its own id, a tenant's by its stored id."""
    address = stored_id[1:] if stored_id.startswith(":") else stored_id
    return f"{SCHEDULES}{quote(address)}/{suffix}"


def db_now():
    return sql("SELECT now()")[0][0]


@pytest.fixture
def weekly(transactional_db):
    return schedules_api.schedule(
        "weekly", "tests.noop", "0 9 * * 1", tz="Europe/Berlin", overlap="skip", pause_on_failure=True
    )


def test_the_page_shows_the_cron_in_words_the_next_five_fires_in_its_zone_and_its_policies(weekly, admin_client):
    html = admin_client.get(page(":weekly")).content.decode()
    assert "at 09:00 on Mondays" in html and 'class="durable-overlap">skip<' in html
    assert "pauses on a failed run" in html
    listed = re.findall(r"<ol class=\"durable-next-fires\">(.*?)</ol>", html, re.S)[0]
    fires = re.findall(r"<li>(.*?)</li>", listed)
    spec, expected, at = parse("0 9 * * 1", "Europe/Berlin"), [], weekly.next_fire_at
    for _ in range(5):
        local = at.astimezone(BERLIN)
        expected.append(f"{local:%Y-%m-%d %H:%M:%S} {local.tzname()}")
        at = next_fire_after(spec, at)
    assert fires == expected and all(" 09:00:00 " in fire for fire in fires)
    # Zones are offered from a list, the schedule's own selected.
    assert '<option value="Europe/Berlin" selected>' in html and '<option value="Asia/Tokyo">' in html


def test_the_page_lists_the_last_runs_with_their_status_and_why_it_paused(weekly, admin_client):
    schedules_api.schedule("failing", "tests.always_fails", "0 * * * *", pause_on_failure=True)
    tick = (db_now() - timedelta(hours=2)).replace(minute=0, second=0, microsecond=0)
    [run] = schedules_api.backfill("failing", tick, tick + timedelta(minutes=1))
    for _ in range(3):
        run_until_idle()
        sql("UPDATE durable_run SET available_at = now() WHERE status = 'pending'")
    from durable_django.engine.schedules import settle_ended_runs

    settle_ended_runs()
    html = admin_client.get(page(":failing")).content.decode()
    assert run.run_id in html and "durable-status-failed" in html
    reason = re.findall(r'durable-paused-reason">Paused itself: (.*?)</p>', html)
    assert reason and reason[0].startswith(f"run {run.run_id} failed") and "KeyError" in reason[0]
    listing = admin_client.get(SCHEDULES).content.decode()
    assert "paused: run" in listing and "every hour" in listing


def test_a_zone_outside_the_list_is_a_form_error_and_nothing_is_written(weekly, admin_client):
    before = sql("SELECT * FROM durable_schedule")
    response = admin_client.post(
        page(":weekly"),
        {"name": "tests.noop", "cron": "0 9 * * 1", "tz": "Mars/Olympus", "input": "", "overlap": "bogus"},
    )
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert "unknown time zone" in errors["tz"][0] and "overlap" in errors
    assert sql("SELECT * FROM durable_schedule") == before


def test_policies_are_changed_through_the_form(weekly, admin_client):
    response = admin_client.post(
        page(":weekly"),
        {
            "name": "tests.noop",
            "cron": "*/5 * * * *",
            "tz": "Asia/Tokyo",
            "input": "",
            "enabled": "on",
            "overlap": "buffer_one",
            "catchup_window": "01:00:00",
            "jitter": "30",
        },
    )
    assert response.status_code == 302
    stored = schedules_api.get_schedule("weekly")
    assert (stored.overlap, stored.catchup_window, stored.jitter, stored.pause_on_failure) == (
        "buffer_one", timedelta(hours=1), timedelta(seconds=30), False,
    )  # fmt: skip


def test_backfill_asks_for_a_range_confirms_the_tick_count_and_reports_the_runs_made(transactional_db, admin_client):
    schedules_api.schedule("hourly", "tests.noop", "0 * * * *", tz="Europe/Berlin")
    end = db_now().astimezone(BERLIN).replace(minute=0, second=0, microsecond=0)
    start = end - timedelta(hours=3)
    form = admin_client.get(page(":hourly", "backfill/"))
    assert form.status_code == 200 and 'name="start"' in form.content.decode()
    data = {"start": f"{start:%Y-%m-%d %H:%M}", "end": f"{end:%Y-%m-%d %H:%M}"}
    confirm = admin_client.post(page(":hourly", "backfill/"), data)
    assert confirm.status_code == 200 and "This fires 3 ticks" in confirm.content.decode()
    assert sql("SELECT count(*) FROM durable_run")[0][0] == 0  # nothing before the confirmation
    done = admin_client.post(page(":hourly", "backfill/"), {**data, "confirm": "yes"}, follow=True)
    assert "Backfill made 3 runs for 3 ticks" in done.content.decode()
    assert sql("SELECT count(*) FROM durable_run")[0][0] == 3
    again = admin_client.post(page(":hourly", "backfill/"), {**data, "confirm": "yes"}, follow=True)
    assert "Backfill made 0 runs for 3 ticks" in again.content.decode()
    assert sql("SELECT count(*) FROM durable_run")[0][0] == 3


@pytest.mark.parametrize(
    "start, end, error",
    [
        ("yesterday", "2024-01-01 00:00", "YYYY-MM-DD HH:MM"),
        ("2024-01-02 00:00", "2024-01-01 00:00", "must come after"),
        ("2024-01-01 00:00", "2999-01-01 00:00", "more than"),
        ("2024-01-01 00:00", "2024-01-01 03:00\x00", "Null characters are not allowed"),
    ],
)
def test_a_bad_backfill_range_is_a_form_error_never_a_500(transactional_db, admin_client, start, end, error):
    schedules_api.schedule("hourly", "tests.noop", "0 * * * *")
    response = admin_client.post(page(":hourly", "backfill/"), {"start": start, "end": end, "confirm": "yes"})
    assert response.status_code == 200 and error in response.content.decode()
    assert sql("SELECT count(*) FROM durable_run")[0][0] == 0


def test_a_future_end_is_refused_by_the_backfill_and_shown_on_the_form(transactional_db, admin_client):
    schedules_api.schedule("hourly", "tests.noop", "0 * * * *")
    now = db_now()
    data = {"start": f"{now - timedelta(hours=2):%Y-%m-%d %H:%M}", "end": f"{now + timedelta(hours=2):%Y-%m-%d %H:%M}"}
    response = admin_client.post(page(":hourly", "backfill/"), {**data, "confirm": "yes"})
    assert response.status_code == 200 and "must not be in the future" in response.content.decode()
    assert sql("SELECT count(*) FROM durable_run")[0][0] == 0


def test_backfill_needs_the_fire_permission(transactional_db, staff_client):
    schedules_api.schedule("hourly", "tests.noop", "0 * * * *")
    viewer = staff_client("view_schedule")
    assert viewer.get(page(":hourly", "backfill/")).status_code == 403
    assert "Backfill" not in viewer.get(page(":hourly")).content.decode().split("object-tools")[1][:400]
    firer = staff_client("view_schedule", "fire_schedule")
    assert firer.get(page(":hourly", "backfill/")).status_code == 200
