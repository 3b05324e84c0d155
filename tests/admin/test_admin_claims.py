"""The admin says claims and failures apart: a run's attempts count its claims (a resume after a sleep, a
signal or a child is one), its failures what the retry budget counts."""

import pytest
from django.urls import reverse

from durable_django import api
from durable_django.testing import make_due, run_until_idle

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_run_claimed_four_times_that_failed_once_reads_so_in_the_listing_its_page_and_its_attempts(admin_client):
    run = api.enqueue("tests.console_tour", {})
    run_until_idle()  # claim 1: the step, then it fails; claim 2 (no delay): the sleep
    make_due(run.run_id)
    run_until_idle()  # claim 3 spawns the child and waits; the child runs; claim 4 finishes
    run_until_idle()
    stored = api.get_run(run.run_id)
    assert stored.status == "succeeded" and stored.attempts == 4
    listing = admin_client.get(reverse("admin:durable_django_run_changelist"), {"function": "tests.console_tour"})
    assert '<span title="claimed 4 times, failed 1">4 claims, failed 1</span>' in listing.content.decode()
    page = admin_client.get(reverse("admin:durable_django_run_change", args=[run.run_id])).content.decode()
    summary = page.split('class="form-row field-attempts_display"')[1].split("</div>\n")[0]
    assert "Claims and failures" in summary and "claimed 4 times, failed 1" in summary
    attempts = page.split('id="durable-attempts"')[1].split("</table>")[0]
    assert "(claimed 4 times, failed 1; each claim is an attempt)" in attempts
    assert "<th>claim</th><th>outcome</th>" in attempts
    assert "claim 4 by " in page.split('id="durable-timeline"')[1].split("</table>")[0]


def test_a_run_that_only_suspended_has_claims_and_no_failures(admin_client):
    run = api.enqueue("tests.signal_waiter", {})
    run_until_idle()
    api.emit_signal(run.run_id, "approval", {"approved": True})
    run_until_idle()
    assert api.get_run(run.run_id).attempts == 2
    page = admin_client.get(reverse("admin:durable_django_run_change", args=[run.run_id])).content.decode()
    summary = page.split('class="form-row field-attempts_display"')[1].split("</div>\n")[0]
    assert "claimed 2 times" in summary and "failed" not in summary
