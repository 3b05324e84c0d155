"""Every admin page and action through Django's test client, with its permission checks.

Runs are made by the real engine (tests/admin/conftest.py); every action is
checked by reading the run back through the client API afterwards.
"""

import json
import re
import threading

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.admin.utils import quote
from django.contrib.auth import get_user_model
from django.db import connection, transaction
from django.db import connections as db_connections
from django.test.utils import CaptureQueriesContext

from durable_django import CancelOutcome, api
from durable_django.api import schedules as schedules_api
from durable_django.models import Schedule
from durable_django.registry import registry
from durable_django.store import overview as overview_store
from durable_django.testing import run_until_idle
from tests.admin.conftest import TENANT, status_of
from tests.helpers import ROOT, sql, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

RUNS = "/admin/durable_django/run/"
SCHEDULES = "/admin/durable_django/schedule/"


def run_url(run_id, suffix="change/"):
    return f"{RUNS}{run_id}/{suffix}"


def listed_run_ids(response) -> list[str]:
    """The run ids of the changelist's rows, in display order."""
    return re.findall(r'<input type="checkbox" name="_selected_action" value="([^"]+)"', response.content.decode())


def rows_html(response) -> str:
    html = response.content.decode()
    return html[html.index('id="result_list"') :]


def bulk(client, action, run_ids, **extra):
    """Post an admin action from the runs changelist, as the action bar does."""
    return client.post(RUNS, {"action": action, "_selected_action": run_ids, "index": "0", **extra})


def confirm_bulk(client, action, run_ids, **extra):
    return bulk(client, action, run_ids, confirm="yes", **extra)


# -- the runs listing ------------------------------------------------------


def test_listing_is_newest_first_with_status_function_attempts_lease_and_wait(example_runs, admin_client):
    response = admin_client.get(RUNS)
    assert response.status_code == 200
    ids = listed_run_ids(response)
    newest_first = [run.run_id for run in api.list_runs(limit=100).items]
    assert ids == newest_first and len(ids) == 9
    rows = rows_html(response)
    assert '<span class="durable-status durable-status-failed">Failed</span>' in rows
    assert '<span class="durable-status durable-status-waiting">Waiting</span>' in rows
    assert 'tests.<wbr>two_steps <span class="durable-version">v1</span>' in rows
    # Claims and failures apart: every claim of the failed run failed.
    assert '<span title="claimed 3 times, failed 3">3 claims, failed 3</span>' in rows
    assert "signal “approval”" in rows
    assert re.search(r"child <a href=\"[^\"]+\" class=\"durable-run-id\">" + example_runs.child[:8], rows)
    assert re.search(r'<span title="held by admin-tests:1">4m 5\ds left</span>', rows)
    # No column can be sorted: every order but the listing index's would sort the table.
    assert "sortable" not in rows[: rows.index("</thead>")]


def test_listing_overview_counts_the_last_hour_and_day(example_runs, admin_client):
    response = admin_client.get(RUNS)
    overview = response.context["overview"]
    expected = dict(sql("SELECT status, count(*) FROM durable_run GROUP BY status"))
    assert overview.last_hour.by_status == expected == overview.last_day.by_status
    assert overview.oldest_pending_run_id == example_runs.pending
    assert overview.created_per_minute == pytest.approx(9 / 60)
    assert overview.landed_per_minute == pytest.approx(expected["succeeded"] / 60 + expected["failed"] / 60)
    html = response.content.decode()
    assert 'class="durable-overview"' in html and example_runs.pending in html


def test_overview_counts_are_capped_and_say_so(example_runs):
    capped = overview_store.overview(cap=4)
    assert capped.last_day.capped and capped.last_day.total == 4
    assert capped.last_hour.capped
    assert not overview_store.overview().last_day.capped


@pytest.mark.parametrize(
    "query, expected",
    [
        ("status=failed", ["failed"]),
        ("status=waiting", ["waiting", "parent", "child"]),
        ("function=tests.noop", ["keyed", "tenant_keyed"]),
        (f"tenant={TENANT}", ["tenant_keyed"]),
        ("tenant=none&function=tests.noop", ["keyed"]),
        ("parent=PARENT", ["child"]),
        ("status=succeeded&function=tests.two_steps", ["succeeded"]),
    ],
)
def test_filters_narrow_the_listing(example_runs, admin_client, query, expected):
    query = query.replace("PARENT", example_runs.parent)
    response = admin_client.get(f"{RUNS}?{query}")
    assert response.status_code == 200
    assert sorted(listed_run_ids(response)) == sorted(getattr(example_runs, name) for name in expected)


def test_created_at_filter_keeps_todays_runs_and_drops_older_ones(example_runs, admin_client):
    sql("UPDATE durable_run SET created_at = now() - interval '3 days' WHERE run_id = %s", [example_runs.failed])
    response = admin_client.get(RUNS, {"created_at__gte": "2000-01-01 00:00:00+00:00"})
    assert len(listed_run_ids(response)) == 9
    changelist = admin_client.get(RUNS).context["cl"]
    created = next(spec for spec in changelist.filter_specs if spec.title == "created at")
    today = next(choice for choice in created.choices(changelist) if choice["display"] == "Today")
    ids = listed_run_ids(admin_client.get(f"{RUNS}{today['query_string']}"))
    assert len(ids) == 8 and example_runs.failed not in ids


def test_function_filter_offers_the_registry_without_scanning_runs(example_runs, admin_client):
    with CaptureQueriesContext(connection) as captured:
        response = admin_client.get(RUNS)
    function_filter = next(spec for spec in response.context["cl"].filter_specs if spec.title == "function")
    assert [value for value, _ in function_filter.lookup_choices] == registry.names()
    assert not [query["sql"] for query in captured if "DISTINCT" in query["sql"].upper()]


def test_a_malformed_tenant_filter_is_refused_not_crashed(example_runs, admin_client):
    response = admin_client.get(f"{RUNS}?tenant=not-a-uuid")
    assert response.status_code == 302 and response.url.endswith("?e=1")


@pytest.mark.parametrize(
    "term, expected",
    [
        ("RUN", ["succeeded"]),
        ("order-1", ["keyed", "tenant_keyed"]),  # idempotency key untagged, coalesce key under TENANT
        (":order-1", ["keyed"]),  # the stored form is found too
        (f"{TENANT}:order-1", ["tenant_keyed"]),
        ("order", []),  # exact match only
        ("order-1 ", ["keyed", "tenant_keyed"]),
    ],
)
def test_search_is_exact_by_run_id_and_keys_as_passed(example_runs, admin_client, term, expected):
    term = term.replace("RUN", example_runs.succeeded)
    response = admin_client.get(RUNS, {"q": term})
    assert sorted(listed_run_ids(response)) == sorted(getattr(example_runs, name) for name in expected)


def test_search_within_a_tenant_matches_only_that_tenants_keys(example_runs, admin_client):
    assert listed_run_ids(admin_client.get(RUNS, {"q": "order-1", "tenant": TENANT})) == [example_runs.tenant_keyed]
    assert listed_run_ids(admin_client.get(RUNS, {"q": "order-1", "tenant": "none"})) == [example_runs.keyed]


def test_counts_beyond_the_exact_bound_are_estimates(example_runs, admin_client, settings):
    sql("""INSERT INTO durable_run (run_id, name, status, retry_policy, created_at, updated_at)
           SELECT 'bulk-' || i, 'tests.noop', 'succeeded', '{}', now() - make_interval(secs => i), now()
           FROM generate_series(1, 1500) i""")
    sql("ANALYZE durable_run")
    response = admin_client.get(RUNS)
    paginator = response.context["cl"].paginator
    assert paginator.estimated and paginator.count >= 1000
    assert "the count is PostgreSQL's estimate" in response.content.decode()
    assert len(listed_run_ids(admin_client.get(f"{RUNS}?p=3"))) == 100
    exact = admin_client.get(f"{RUNS}?status=failed").context["cl"].paginator
    assert not exact.estimated and exact.count == 1


# -- a run's page ----------------------------------------------------------


def test_run_page_shows_input_output_timeline_and_the_journal_in_order(example_runs, admin_client):
    response = admin_client.get(run_url(example_runs.succeeded))
    assert response.status_code == 200
    html = response.content.decode()
    journal = html[html.index('id="durable-journal"') :]
    assert journal.index('data-step-id="v1:first:0"') < journal.index('data-step-id="v1:second:0"')
    assert "&quot;one&quot;" in journal and "&quot;two&quot;" in journal
    assert '"second_sleep": 0' in html.replace("&quot;", '"')
    output = html[html.index('id="durable-output"') : html.index('id="durable-tree"')]
    shown = re.search(r"<pre[^>]*>(.*?)</pre>", output, re.S).group(1)
    assert json.loads(shown.replace("&quot;", '"')) == ["one", "two"]
    timeline = [label for label, _, _ in response.context["timeline"]]
    assert timeline[:3] == ["created", "first claimed", "last claimed"] and "finished" in timeline
    assert "leased until" not in timeline


def test_run_page_shows_the_error_type_and_a_readable_traceback(example_runs, admin_client):
    html = admin_client.get(run_url(example_runs.failed)).content.decode()
    error = html[html.index('id="durable-error"') :]
    assert "<code>builtins.KeyError</code>" in error
    assert '<pre class="durable-traceback">Traceback (most recent call last):\n' in error
    assert "raise KeyError(&quot;broken on purpose&quot;)" in error
    # Files read relative to the import path they came from; the stored record keeps them whole.
    assert 'File "tests/workflows/durable.py"' in error.replace("&quot;", '"')
    assert 'File "durable_django/engine/execute.py"' in error.replace("&quot;", '"')
    assert ROOT in api.get_run(example_runs.failed).error


def test_run_page_links_parent_and_children(example_runs, admin_client):
    parent_html = admin_client.get(run_url(example_runs.parent)).content.decode()
    assert f'href="{run_url(example_runs.child)}"' in parent_html
    assert f"{RUNS}?parent={example_runs.parent}" in parent_html
    assert "spawn-child" in parent_html
    child_html = admin_client.get(run_url(example_runs.child)).content.decode()
    tree = child_html[child_html.index('id="durable-tree"') :]
    assert f'href="{run_url(example_runs.parent)}"' in tree


def test_run_page_shows_signals_and_the_running_runs_lease(example_runs, admin_client):
    api.emit_signal(example_runs.waiting, "other", {"early": True})
    html = admin_client.get(run_url(example_runs.waiting)).content.decode()
    assert 'id="durable-signals"' in html and "&quot;early&quot;: true" in html
    running = admin_client.get(run_url(example_runs.running))
    assert "leased until" in [label for label, _, _ in running.context["timeline"]]


def test_records_are_read_only(example_runs, admin_client):
    assert admin_client.get(f"{RUNS}add/").status_code == 403
    assert admin_client.get(run_url(example_runs.failed, "delete/")).status_code == 403
    before = api.get_run(example_runs.failed)
    response = admin_client.post(run_url(example_runs.failed), {"status": "succeeded"})
    assert response.status_code == 403
    assert api.get_run(example_runs.failed) == before
    page = admin_client.get(run_url(example_runs.failed)).content.decode()
    assert 'name="_save"' not in page and "deletelink" not in page
    actions = admin_client.get(RUNS).context["action_form"].fields["action"].choices
    assert "delete_selected" not in [value for value, _ in actions]


# -- actions ---------------------------------------------------------------


def test_bulk_cancel_confirms_first_then_reports_each_outcome(example_runs, admin_client):
    chosen = [example_runs.waiting, example_runs.running, example_runs.succeeded]
    confirmation = bulk(admin_client, "cancel_runs", chosen)
    assert confirmation.status_code == 200 and "Yes, cancel" in confirmation.content.decode()
    assert [status_of(run_id) for run_id in chosen] == ["waiting", "running", "succeeded"]

    outcome = confirm_bulk(admin_client, "cancel_runs", chosen)
    assert outcome.status_code == 200
    labels = {target.pk: result.label for target, result in outcome.context["rows"]}
    assert labels == {
        example_runs.waiting: "cancelled",
        example_runs.running: "requested",
        example_runs.succeeded: "refused",
    }
    html = outcome.content.decode()
    for run_id in chosen:
        assert f'data-target="{run_id}"' in html
    assert status_of(example_runs.waiting) == "cancelled"
    running = api.get_run(example_runs.running)
    assert running.status == "running" and running.cancel_requested_at is not None
    succeeded = api.get_run(example_runs.succeeded)
    assert succeeded.status == "succeeded" and succeeded.cancel_refused_at is not None
    audit = LogEntry.objects.filter(object_id=example_runs.waiting, change_message__startswith="Cancel: cancelled")
    assert audit.exists()


def test_bulk_cancel_confirms_exactly_the_listed_runs(example_runs, admin_client):
    # The confirmation lists the selected runs and posts exactly those back ("select all" is every match:
    # tests/admin/test_admin_bulk.py).
    selected = [run.run_id for run in api.list_runs(limit=100).items]
    confirmation = bulk(admin_client, "cancel_runs", selected)
    listed = [target.pk for target, _ in confirmation.context["rows"]]
    assert sorted(listed) == sorted(selected)
    late = api.enqueue("tests.noop", {"late": True}).run_id
    confirm_bulk(admin_client, "cancel_runs", listed)
    assert status_of(late) == "pending"


def test_the_cancel_button_on_a_run_confirms_and_reports(example_runs, admin_client):
    page = admin_client.get(run_url(example_runs.parent)).content.decode()
    assert f'href="{run_url(example_runs.parent, "cancel/")}"' in page
    confirmation = admin_client.get(run_url(example_runs.parent, "cancel/"))
    assert confirmation.status_code == 200 and status_of(example_runs.parent) == "waiting"
    response = admin_client.post(run_url(example_runs.parent, "cancel/"), {"confirm": "yes"}, follow=True)
    assert response.redirect_chain[-1][0] == run_url(example_runs.parent)
    assert "Cancel: cancelled" in next(str(message) for message in response.context["messages"])
    # The cascade cancelled the child too.
    assert status_of(example_runs.parent) == "cancelled" and status_of(example_runs.child) == "cancelled"


def test_no_cancel_button_on_a_run_whose_cancel_is_already_requested(example_runs, admin_client):
    assert "durable-operation-cancel" in admin_client.get(run_url(example_runs.running)).content.decode()
    assert api.cancel(example_runs.running) == CancelOutcome.REQUESTED
    page = admin_client.get(run_url(example_runs.running)).content.decode()
    assert "durable-operation-cancel" not in page and "durable-operation-signal" in page


def test_no_cancel_button_on_a_finished_run(example_runs, admin_client):
    page = admin_client.get(run_url(example_runs.succeeded)).content.decode()
    assert "durable-operation-cancel" not in page and "durable-operation-retry" in page


def test_resume_puts_a_failed_run_back_to_pending_with_its_journal(example_runs, admin_client):
    response = admin_client.post(run_url(example_runs.failed, "resume/"), {"confirm": "yes"}, follow=True)
    assert "Resume: resumed" in str(next(iter(response.context["messages"])))
    run = api.get_run(example_runs.failed)
    assert run.status == "pending" and run.error is None


def test_resume_refuses_a_run_that_did_not_fail(example_runs, admin_client):
    outcome = confirm_bulk(admin_client, "resume_runs", [example_runs.succeeded, example_runs.failed])
    labels = {target.pk: result.label for target, result in outcome.context["rows"]}
    assert labels == {example_runs.succeeded: "refused", example_runs.failed: "resumed"}
    assert status_of(example_runs.succeeded) == "succeeded"


def test_retry_enqueues_a_new_run_with_the_same_input(example_runs, admin_client):
    sql("UPDATE durable_run SET queue = 'reports', priority = 7 WHERE run_id = %s", [example_runs.tenant_keyed])
    outcome = confirm_bulk(admin_client, "retry_runs", [example_runs.tenant_keyed, example_runs.waiting])
    results = {target.pk: result for target, result in outcome.context["rows"]}
    assert results[example_runs.waiting].label == "refused"
    new_id = results[example_runs.tenant_keyed].new_run_id
    original, new = api.get_run(example_runs.tenant_keyed), api.get_run(new_id)
    assert new.run_id != original.run_id and new.status == "pending"
    assert (new.name, new.version, new.input, new.tenant_id, new.queue, new.priority) == (
        original.name,
        original.version,
        original.input,
        original.tenant_id,
        "reports",
        7,
    )
    assert new.coalesce_key is None and new.idempotency_key is None


def test_the_retry_button_leads_to_the_new_run(example_runs, admin_client):
    response = admin_client.post(run_url(example_runs.failed, "retry/"), {"confirm": "yes"})
    new_id = response.url.rstrip("/").split("/")[-2]
    assert new_id != example_runs.failed and api.get_run(new_id).input == {"why": "to fail"}


def test_signal_form_is_prefilled_validates_json_and_wakes_the_run(example_runs, admin_client):
    url = run_url(example_runs.waiting, "signal/")
    form = admin_client.get(url).context["form"]
    assert form.initial == {"signal": "approval", "occurrence": 0}
    invalid = admin_client.post(url, {"confirm": "yes", "signal": "approval", "occurrence": "0", "value": "{nope"})
    assert invalid.status_code == 200 and "not valid JSON" in invalid.content.decode()
    assert status_of(example_runs.waiting) == "waiting"
    response = admin_client.post(
        url, {"confirm": "yes", "signal": "approval", "occurrence": "0", "value": '{"ok": true}'}, follow=True
    )
    assert "Send a signal: signal stored" in str(next(iter(response.context["messages"])))
    assert status_of(example_runs.waiting) == "pending"
    run_until_idle(functions=["tests.signal_waiter"])
    assert api.get_run(example_runs.waiting).output == {"approval": {"ok": True}}


def test_a_second_signal_reports_the_value_already_kept(example_runs, admin_client):
    api.emit_signal(example_runs.waiting, "approval", "first")
    outcome = confirm_bulk(
        admin_client, "signal_runs", [example_runs.waiting], signal="approval", occurrence="0", value='"second"'
    )
    [(_, result)] = outcome.context["rows"]
    assert result.label == "already sent" and '"first"' in result.detail


# -- permissions -----------------------------------------------------------

OPERATIONS = {
    # action: (permission, the run it is tried on, extra form data, the status it would leave)
    "cancel": ("cancel_run", "waiting", {}, "cancelled"),
    "resume": ("retry_run", "failed", {}, "pending"),
    "signal": ("signal_run", "waiting", {"signal": "approval", "occurrence": "0", "value": "1"}, "pending"),
}


def test_a_viewer_sees_runs_but_gets_no_action_and_no_button(example_runs, staff_client):
    viewer = staff_client("view_run")
    response = viewer.get(RUNS)
    assert response.status_code == 200 and response.context["action_form"] is None
    assert 'name="_selected_action"' not in response.content.decode()
    page = viewer.get(run_url(example_runs.waiting)).content.decode()
    assert "durable-operation" not in page


@pytest.mark.parametrize("key", sorted(OPERATIONS))
def test_an_operation_without_its_permission_is_refused(example_runs, staff_client, key):
    permission, target, data, _ = OPERATIONS[key]
    others = [codename for codename in ("cancel_run", "retry_run", "signal_run") if codename != permission]
    client = staff_client("view_run", *others)
    run_id = getattr(example_runs, target)
    before = api.get_run(run_id)
    choices = [value for value, _ in client.get(RUNS).context["action_form"].fields["action"].choices]
    assert f"{key}_runs" not in choices
    confirm_bulk(client, f"{key}_runs", [run_id], **data)
    assert client.get(run_url(run_id, f"{key}/")).status_code == 403
    assert client.post(run_url(run_id, f"{key}/"), {"confirm": "yes", **data}).status_code == 403
    assert api.get_run(run_id) == before
    assert f"durable-operation-{key}" not in client.get(run_url(run_id)).content.decode()


@pytest.mark.parametrize("key", sorted(OPERATIONS))
def test_an_operation_with_its_permission_is_offered_and_runs(example_runs, staff_client, key):
    permission, target, data, after = OPERATIONS[key]
    client = staff_client("view_run", permission)
    run_id = getattr(example_runs, target)
    choices = [value for value, _ in client.get(RUNS).context["action_form"].fields["action"].choices]
    assert f"{key}_runs" in choices
    assert f"durable-operation-{key}" in client.get(run_url(run_id)).content.decode()
    confirm_bulk(client, f"{key}_runs", [run_id], **data)
    assert status_of(run_id) == after


def test_retry_needs_the_retry_permission(example_runs, staff_client):
    before = sql("SELECT count(*) FROM durable_run")[0][0]
    denied = staff_client("view_run", "cancel_run", "signal_run")
    confirm_bulk(denied, "retry_runs", [example_runs.failed])
    assert denied.post(run_url(example_runs.failed, "retry/"), {"confirm": "yes"}).status_code == 403
    assert sql("SELECT count(*) FROM durable_run")[0][0] == before
    allowed = staff_client("view_run", "retry_run")
    confirm_bulk(allowed, "retry_runs", [example_runs.failed])
    assert sql("SELECT count(*) FROM durable_run")[0][0] == before + 1


def test_no_view_permission_no_runs(example_runs, staff_client):
    client = staff_client("cancel_run")
    assert client.get(RUNS).status_code == 403
    assert client.post(run_url(example_runs.waiting, "cancel/"), {"confirm": "yes"}).status_code == 403
    assert status_of(example_runs.waiting) == "waiting"


# -- schedules -------------------------------------------------------------


@pytest.fixture
def nightly(transactional_db):
    return schedules_api.schedule("nightly", "tests.noop", "30 2 * * *", tz="Europe/Berlin", input={"report": 1})


def schedule_url(stored_id, suffix="change/"):
    """A schedule's page: an untagged one by its own id, a tenant's by its stored id."""
    address = stored_id[1:] if stored_id.startswith(":") else stored_id
    return f"{SCHEDULES}{quote(address)}/{suffix}"


def test_schedule_listing_shows_the_next_fire_in_its_own_zone(nightly, admin_client):
    response = admin_client.get(SCHEDULES)
    assert response.status_code == 200
    local = nightly.next_fire_at.astimezone(__import__("zoneinfo").ZoneInfo("Europe/Berlin"))
    assert local.hour == 2 and local.minute == 30
    listing = response.content.decode()
    assert f"{local:%Y-%m-%d} 02:30:00 {local.tzname()}</span>" in listing
    assert '<span class="durable-note">Europe/Berlin</span>' in listing


def test_a_stored_zone_that_names_a_folder_still_lists_and_shows_the_schedule(nightly, admin_client):
    sql("UPDATE durable_schedule SET tz = 'Europe' WHERE schedule_id = ':nightly'")
    assert admin_client.get(SCHEDULES).status_code == 200
    assert admin_client.get(schedule_url(":nightly")).status_code == 200


def test_adding_a_schedule_validates_cron_and_zone_and_writes_nothing_when_invalid(admin_client, transactional_db):
    bad = admin_client.post(
        f"{SCHEDULES}add/",
        {
            "key": "hourly",
            "name": "tests.noop",
            "cron": "61 * * * *",
            "tz": "Mars/Olympus",
            "input": "",
            "enabled": "on",
        },
    )
    assert bad.status_code == 200
    errors = bad.context["adminform"].form.errors
    assert "unknown time zone" in errors["tz"][0] and "invalid cron expression" in errors["cron"][0]
    never = admin_client.post(
        f"{SCHEDULES}add/",
        {"key": "hourly", "name": "tests.noop", "cron": "0 0 30 2 *", "tz": "UTC", "input": "", "enabled": "on"},
    )
    assert "cron" in never.context["adminform"].form.errors
    assert not Schedule.objects.exists()

    good = admin_client.post(
        f"{SCHEDULES}add/",
        {
            "key": "hourly",
            "tenant": TENANT,
            "name": "tests.noop",
            "cron": "0  *  * * *",
            "tz": "Asia/Tokyo",
            "input": '{"a": 1}',
            "enabled": "on",
        },
    )
    assert good.status_code == 302
    stored = schedules_api.get_schedule("hourly", tenant_id=TENANT)
    assert (stored.name, stored.cron, stored.tz, stored.input, stored.enabled) == (
        "tests.noop",
        "0 * * * *",
        "Asia/Tokyo",
        {"a": 1},
        True,
    )


@pytest.mark.parametrize("source", ["api", "settings"])
def test_adding_an_existing_schedule_id_is_refused_and_writes_nothing(nightly, staff_client, source):
    sql("UPDATE durable_schedule SET source = %s WHERE schedule_id = ':nightly'", [source])
    before = sql("SELECT * FROM durable_schedule")
    adder = staff_client("view_schedule", "add_schedule")
    response = adder.post(
        f"{SCHEDULES}add/",
        {
            "key": "nightly",
            "name": "tests.noop",
            "cron": "* * * * *",
            "tz": "UTC",
            "input": '{"report": "replaced"}',
            "enabled": "on",
        },
    )
    assert response.status_code == 200
    assert "already exists in this tenant" in response.context["adminform"].form.errors["key"][0]
    assert sql("SELECT * FROM durable_schedule") == before
    # The same id in another tenant is another schedule.
    other = adder.post(
        f"{SCHEDULES}add/",
        {
            "key": "nightly",
            "tenant": TENANT,
            "name": "tests.noop",
            "cron": "* * * * *",
            "tz": "UTC",
            "input": "",
            "enabled": "on",
        },
    )
    assert other.status_code == 302 and schedules_api.get_schedule("nightly", tenant_id=TENANT).cron == "* * * * *"
    assert sql("SELECT * FROM durable_schedule WHERE schedule_id = ':nightly'") == before


def test_an_add_racing_another_add_of_the_same_id_writes_nothing(admin_client):
    """The other add commits after this one's form was validated: the upsert would replace it, so it is undone."""
    responses = []

    def add_from_the_admin():
        try:
            responses.append(
                admin_client.post(
                    f"{SCHEDULES}add/",
                    {
                        "key": "nightly",
                        "name": "tests.noop",
                        "cron": "* * * * *",
                        "tz": "UTC",
                        "input": "",
                        "enabled": "on",
                    },
                )
            )
        finally:
            db_connections.close_all()

    with transaction.atomic():
        schedules_api.schedule("nightly", "tests.noop", "30 2 * * *")
        adder = threading.Thread(target=add_from_the_admin)
        adder.start()
        # The admin's validation saw no such schedule; its insert now waits for this transaction.
        wait_until(
            lambda: (
                sql("SELECT pg_stat_clear_snapshot()") is not None
                and sql(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                    "AND wait_event_type = 'Lock' AND query LIKE '%%INSERT INTO durable_schedule%%'"
                )[0][0]
                == 1
            ),
            message="the admin's insert to wait for the uncommitted schedule",
        )
    adder.join(timeout=30)
    [response] = responses
    assert response.status_code == 302 and response.url == f"{SCHEDULES}add/"
    messages = [str(message) for message in admin_client.get(SCHEDULES).context["messages"]]
    assert any("Nothing was saved: a schedule" in message and "already exists" in message for message in messages)
    assert schedules_api.get_schedule("nightly").cron == "30 2 * * *"


def test_changing_a_schedule_goes_through_the_api_and_keeps_its_identity(nightly, admin_client):
    url = schedule_url(":nightly")
    form = admin_client.get(url).context["adminform"].form
    assert form.initial["key"] == "nightly" and form.fields["key"].disabled
    response = admin_client.post(
        url,
        {
            "key": "renamed",
            "name": "tests.noop",
            "cron": "0 6 * * *",
            "tz": "Europe/Berlin",
            "input": '{"report": 2}',
            "enabled": "on",
        },
    )
    assert response.status_code == 302
    stored = schedules_api.get_schedule("nightly")
    assert stored.cron == "0 6 * * *" and stored.input == {"report": 2}
    assert stored.next_fire_at.astimezone(__import__("zoneinfo").ZoneInfo("Europe/Berlin")).hour == 6
    assert schedules_api.get_schedule("renamed") is None


def test_editing_a_schedule_of_a_function_this_process_lacks_is_a_form_error(nightly, admin_client):
    sql("UPDATE durable_schedule SET name = 'elsewhere.report' WHERE schedule_id = ':nightly'")
    before = sql("SELECT * FROM durable_schedule")
    response = admin_client.post(
        schedule_url(":nightly"),
        {"name": "elsewhere.report", "cron": "0 6 * * *", "tz": "UTC", "input": "", "enabled": "on"},
    )
    assert response.status_code == 200
    error = response.context["adminform"].form.errors["name"][0]
    assert "No function 'elsewhere.report' is registered in this web process" in error
    assert sql("SELECT * FROM durable_schedule") == before


def test_enable_disable_and_fire_now_are_confirmed_actions(nightly, admin_client):
    confirmation = admin_client.post(
        SCHEDULES, {"action": "disable_schedules", "_selected_action": [":nightly"], "index": "0"}
    )
    assert confirmation.status_code == 200 and schedules_api.get_schedule("nightly").enabled
    admin_client.post(
        SCHEDULES, {"action": "disable_schedules", "_selected_action": [":nightly"], "index": "0", "confirm": "yes"}
    )
    assert not schedules_api.get_schedule("nightly").enabled
    admin_client.post(
        SCHEDULES, {"action": "enable_schedules", "_selected_action": [":nightly"], "index": "0", "confirm": "yes"}
    )
    assert schedules_api.get_schedule("nightly").enabled
    fired = admin_client.post(
        SCHEDULES, {"action": "fire_schedules", "_selected_action": [":nightly"], "index": "0", "confirm": "yes"}
    )
    [(_, result)] = fired.context["rows"]
    assert result.label == "fired" and api.get_run(result.new_run_id).input == {"report": 1}


def test_the_fire_now_button_confirms_then_shows_the_run(nightly, admin_client):
    page = admin_client.get(schedule_url(":nightly")).content.decode()
    assert schedule_url(":nightly", "fire/") in page
    assert admin_client.get(schedule_url(":nightly", "fire/")).status_code == 200
    assert not api.list_runs(name="tests.noop").items
    response = admin_client.post(schedule_url(":nightly", "fire/"), {"confirm": "yes"})
    [run] = api.list_runs(name="tests.noop").items
    assert response.url == run_url(run.run_id)


def test_deleting_a_schedule_unschedules_it(nightly, admin_client):
    response = admin_client.post(schedule_url(":nightly", "delete/"), {"post": "yes"})
    assert response.status_code == 302 and schedules_api.get_schedule("nightly") is None


def test_schedule_operations_need_their_permissions(nightly, staff_client):
    viewer = staff_client("view_schedule")
    assert viewer.get(SCHEDULES).context["action_form"] is None
    viewer.post(
        SCHEDULES, {"action": "disable_schedules", "_selected_action": [":nightly"], "index": "0", "confirm": "yes"}
    )
    assert schedules_api.get_schedule("nightly").enabled
    assert viewer.post(schedule_url(":nightly", "fire/"), {"confirm": "yes"}).status_code == 403
    assert (
        viewer.post(
            schedule_url(":nightly"),
            {"key": "nightly", "name": "tests.noop", "cron": "* * * * *", "tz": "UTC", "enabled": "on"},
        ).status_code
        == 403
    )
    assert not api.list_runs().items and schedules_api.get_schedule("nightly").cron == "30 2 * * *"

    changer = staff_client("view_schedule", "change_schedule")
    choices = [value for value, _ in changer.get(SCHEDULES).context["action_form"].fields["action"].choices]
    assert "disable_schedules" in choices and "fire_schedules" not in choices
    assert changer.post(schedule_url(":nightly", "fire/"), {"confirm": "yes"}).status_code == 403
    firer = staff_client("view_schedule", "fire_schedule")
    assert firer.post(schedule_url(":nightly", "fire/"), {"confirm": "yes"}).status_code == 302
    assert len(api.list_runs().items) == 1


def test_a_settings_schedule_can_be_disabled_but_not_edited(nightly, admin_client):
    sql("UPDATE durable_schedule SET source = 'settings' WHERE schedule_id = ':nightly'")
    page = admin_client.get(schedule_url(":nightly")).content.decode()
    assert 'name="_save"' not in page
    assert admin_client.post(schedule_url(":nightly", "delete/"), {"post": "yes"}).status_code == 403
    admin_client.post(
        SCHEDULES, {"action": "disable_schedules", "_selected_action": [":nightly"], "index": "0", "confirm": "yes"}
    )
    assert not schedules_api.get_schedule("nightly").enabled


def test_an_action_over_too_many_runs_is_refused_whole(example_runs, admin_client):
    from durable_django.admin.operations import MAX_ACTION_TARGETS

    sql(
        """INSERT INTO durable_run (run_id, name, status, retry_policy, created_at, updated_at)
           SELECT 'many-' || i, 'tests.noop', 'pending', '{}', now(), now() FROM generate_series(1, %s) i""",
        [MAX_ACTION_TARGETS],
    )
    # (Cancel, resume and retry act on every match as a bulk run instead: tests/admin/test_admin_bulk.py.)
    response = bulk(admin_client, "signal_runs", [example_runs.waiting], select_across="1", confirm="yes")
    assert response.status_code == 302
    messages = [str(message) for message in admin_client.get(RUNS).context["messages"]]
    assert any(f"Select at most {MAX_ACTION_TARGETS} runs" in message for message in messages)
    assert sql("SELECT count(*) FROM durable_signal") == [(0,)]


# -- NUL characters --------------------------------------------------------
# PostgreSQL text cannot hold NUL: a value with one names nothing, and must never reach the database.

NUL_OBJECT_URLS = [
    f"{RUNS}%00/{suffix}" for suffix in ("change/", "history/", "delete/", "cancel/", "resume/", "retry/", "signal/")
]
NUL_OBJECT_URLS += [f"{RUNS}RUN%00/change/", f"{RUNS}RUN%00/cancel/"]
NUL_OBJECT_URLS += [f"{SCHEDULES}%00/{suffix}" for suffix in ("change/", "history/", "delete/", "fire/")]


@pytest.fixture
def pending_run(transactional_db) -> str:
    return api.enqueue("tests.noop", {"nul": "tests"}).run_id


NUL_LOOKUPS = [
    (RUNS, query)
    for query in (
        "parent=%00",
        "parent=RUN%00",
        "tenant=%00",
        "function=tests.noop%00",
        "status__exact=%00",
        "q=%00",
        "q=RUN%00",
        "status__exact=failed&p=%00",
    )
]
NUL_LOOKUPS += [(SCHEDULES, query) for query in ("function=%00", "source__exact=%00", "q=nightly%00")]


def test_a_nul_in_an_object_url_is_a_404(pending_run, admin_client):
    for url in (url.replace("RUN", pending_run) for url in NUL_OBJECT_URLS):
        assert admin_client.get(url).status_code == 404, url
        assert admin_client.post(url, {"confirm": "yes", "post": "yes"}).status_code == 404, url
    assert status_of(pending_run) == "pending"


def test_a_nul_in_a_filter_or_search_is_an_invalid_lookup(pending_run, admin_client):
    for listing, query in NUL_LOOKUPS:
        response = admin_client.get(f"{listing}?{query.replace('RUN', pending_run)}")
        assert (response.status_code, response.get("Location")) == (302, f"{listing}?e=1"), query
    assert admin_client.get(f"{RUNS}?e=1").status_code == 200


def test_a_nul_in_a_selection_is_an_invalid_lookup_and_changes_nothing(pending_run, admin_client):
    other = api.enqueue("tests.noop", {"other": True}).run_id
    response = confirm_bulk(admin_client, "cancel_runs", [other, f"{pending_run}\x00"])
    assert response.status_code == 302 and response.url == f"{RUNS}?e=1"
    assert status_of(other) == "pending" and status_of(pending_run) == "pending"


@pytest.mark.parametrize("value", ['"\\u0000"', '{"a": ["ok", "b\\u0000"]}', '{"k\\u0000": 1}'])
def test_a_nul_in_a_json_form_value_is_a_form_error(pending_run, admin_client, value):
    signal = admin_client.post(
        run_url(pending_run, "signal/"), {"confirm": "yes", "signal": "approval", "occurrence": "0", "value": value}
    )
    assert signal.status_code == 200 and signal.context["form"].errors["value"]
    assert not sql("SELECT * FROM durable_signal")
    added = admin_client.post(
        f"{SCHEDULES}add/",
        {"key": "nul", "name": "tests.noop", "cron": "* * * * *", "tz": "UTC", "input": value, "enabled": "on"},
    )
    assert added.status_code == 200 and added.context["adminform"].form.errors["input"]
    assert not Schedule.objects.exists()


# -- fan-out and time limits -------------------------------------------------


def test_deadlines_and_their_failures_are_shown(admin_client, transactional_db):
    from datetime import timedelta

    from durable_django.testing import pass_deadline

    live = api.enqueue("tests.noop", {}, delay=7200, deadline=timedelta(hours=1))
    late = api.enqueue("tests.noop", {}, delay=7200, deadline=timedelta(hours=1))
    pass_deadline(late.run_id)
    run_until_idle()
    rows = rows_html(admin_client.get(RUNS))
    assert re.search(r'<span title="[^"]+">in (59m \d+s|1h 0m)</span>', rows), rows
    live_page = admin_client.get(run_url(live.run_id))
    assert ("deadline", "not finished by then, it fails with DeadlineExceeded") in [
        (label, note) for label, _, note in live_page.context["timeline"]
    ]
    late_page = admin_client.get(run_url(late.run_id))
    html = late_page.content.decode()
    assert "<code>durable_django.exceptions.DeadlineExceeded</code>" in html
    assert "had not finished by its deadline" in html
    assert ("deadline", "passed: the run failed with DeadlineExceeded") in [
        (label, note) for label, _, note in late_page.context["timeline"]
    ]


def test_a_parent_gathering_its_children_says_how_many_are_left(admin_client, transactional_db):
    parent = api.enqueue("tests.fan_out", {"children": [{"value": n, "wait_signal": True} for n in range(3)]})
    run_until_idle()
    rows = rows_html(admin_client.get(RUNS))
    assert "all its awaited children (3 to land)" in rows
    racer = api.enqueue("tests.race_children", {"children": [{"wait_signal": True}], "timeout": 3600})
    run_until_idle()
    html = admin_client.get(run_url(racer.run_id)).content.decode()
    assert "the first of its awaited children to land (timeout " in html
    assert api.get_run(parent.run_id).status == "waiting"


BREADCRUMBS = re.compile(r'<(ol|div) class="breadcrumbs">')


def test_the_confirmation_and_outcome_pages_draw_breadcrumbs_as_djangos_own_pages_do(example_runs, admin_client):
    user = get_user_model().objects.get(username="admin")
    djangos_own = BREADCRUMBS.findall(admin_client.get(f"/admin/auth/user/{user.pk}/change/").content.decode())
    confirmation = bulk(admin_client, "cancel_runs", [example_runs.waiting]).content.decode()
    outcome = confirm_bulk(admin_client, "cancel_runs", [example_runs.waiting]).content.decode()
    assert len(djangos_own) == 1
    assert BREADCRUMBS.findall(confirmation) == djangos_own
    assert BREADCRUMBS.findall(outcome) == djangos_own
