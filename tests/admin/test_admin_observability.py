"""The admin's observability: a run's progress in the listing and on its page, its trace, and the workers page."""

import pytest
from opentelemetry import trace

from durable_django import api
from durable_django.engine import lifecycle
from durable_django.testing import run_until_idle
from tests.helpers import sql

pytestmark = pytest.mark.django_db(transaction=True)

RUNS = "/admin/durable_django/run/"
WORKERS = "/admin/durable_django/worker/"


def test_the_listing_shows_the_start_of_each_runs_progress_and_its_page_all_of_it(admin_client, spans):
    with trace.get_tracer("tests").start_as_current_span("request") as request:
        done = api.enqueue("tests.progress", {"steps": 2})
    long = api.enqueue("tests.oversized_progress", {"chars": 300})
    quiet = api.enqueue("tests.noop", {})
    run_until_idle()
    sql("UPDATE durable_run SET progress = to_jsonb(repeat('x', 300)) WHERE run_id = %s", [long.run_id])
    listing = admin_client.get(RUNS).content.decode()
    assert '<span class="durable-progress">{&quot;done&quot;: 2, &quot;total&quot;: 2}</span>' in listing
    # 80 characters read, and a mark that there is more.
    assert f'<span class="durable-progress">&quot;{"x" * 79}…</span>' in listing
    page = admin_client.get(f"{RUNS}{done.run_id}/change/").content.decode()
    assert 'id="durable-progress"' in page and "&quot;total&quot;: 2" in page
    assert f"{request.get_span_context().trace_id:032x}" in page  # the trace its enqueue was part of
    page = admin_client.get(f"{RUNS}{long.run_id}/change/").content.decode()
    assert "x" * 300 in page
    assert 'id="durable-progress"' not in admin_client.get(f"{RUNS}{quiet.run_id}/change/").content.decode()


def test_the_workers_page_is_read_only_and_needs_its_view_permission(admin_client, staff_client):
    identity = lifecycle.worker_identity(
        worker_id="web-1:41:abcdef", functions=["tests.versioned"], queues=["emails"], tenant_id=None, concurrency=8
    )
    lifecycle.worker_started(identity)
    sql("UPDATE durable_worker SET functions = '{\"tests.versioned\": [2]}'")
    api.enqueue("tests.versioned", {}, version=1)
    page = admin_client.get(WORKERS).content.decode()
    assert f'<td class="field-host">{identity.host}</td><td class="field-pid">{identity.pid}</td>' in page
    assert '<td class="field-queues_display">emails</td>' in page
    assert "tests.versioned <span class='durable-version'>v2</span>" in page
    assert '<li class="durable-expired"><code>tests.versioned</code> v1' in page
    assert "live workers register v2" in page
    assert admin_client.get(f"{WORKERS}add/").status_code == 403
    assert admin_client.post(f"{WORKERS}web-1:41:abcdef/delete/").status_code == 403
    assert staff_client().get(WORKERS).status_code == 403
    assert staff_client("view_worker").get(WORKERS).status_code == 200
