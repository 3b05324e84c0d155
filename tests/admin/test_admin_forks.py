"""The run page's "fork from this step" and "resume on version N", through Django's test client."""

import os

import pytest

from durable_django import api
from durable_django.engine import lifecycle
from durable_django.testing import run_until_idle
from tests.admin.test_admin_pages import run_url
from tests.workflows import effects

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def failed_run():
    effects.touch("forkable-c-broken")
    run = api.enqueue("tests.forkable", {"n": 1}, version=1)
    run_until_idle()
    os.remove(effects._path("forkable-c-broken"))
    assert api.get_run(run.run_id).status == "failed"
    return run


def live_worker(versions):
    identity = lifecycle.worker_identity(
        worker_id="host:1:versions", functions=None, queues=None, tenant_id=None, concurrency=1
    )
    lifecycle.worker_started(identity)
    from tests.helpers import sql

    sql("UPDATE durable_worker SET functions = %s::jsonb", [f'{{"tests.forkable": {versions}}}'])


def test_each_journal_row_forks_from_its_step_after_a_confirmation(staff_client, failed_run):
    client = staff_client("view_run", "fork_run")
    page = client.get(run_url(failed_run.run_id)).content.decode()
    fork_url = run_url(failed_run.run_id, "fork/")
    assert f'href="{fork_url}?from_step=b"' in page and "fork from this step" in page
    confirmation = client.get(f"{fork_url}?from_step=b")
    assert confirmation.status_code == 200 and 'value="b"' in confirmation.content.decode()
    response = client.post(fork_url, {"confirm": "yes", "from_step": "b"})
    assert response.status_code == 302
    fork_id = response["Location"].rstrip("/").split("/")[-2]
    fork = api.get_run(fork_id)
    assert fork.forked_from == {"run_id": failed_run.run_id, "step": "b"}
    assert "Forked from run" in client.get(run_url(fork_id)).content.decode()


def test_a_fork_of_a_step_the_journal_lacks_is_a_message_and_nothing_written(staff_client, failed_run):
    client = staff_client("view_run", "fork_run")
    response = client.post(run_url(failed_run.run_id, "fork/"), {"confirm": "yes", "from_step": "zzz"}, follow=True)
    assert response.status_code == 200
    assert "holds no step" in response.content.decode()
    assert [run.run_id for run in api.list_runs(name="tests.forkable").items] == [failed_run.run_id]


def test_forking_and_resuming_on_a_version_need_their_permissions(staff_client, failed_run):
    live_worker([1, 2])
    client = staff_client("view_run", "retry_run")
    page = client.get(run_url(failed_run.run_id)).content.decode()
    assert "fork from this step" not in page and "Resume on another version" not in page
    assert client.post(run_url(failed_run.run_id, "fork/"), {"confirm": "yes"}).status_code == 403
    assert (
        client.post(run_url(failed_run.run_id, "resume_on_version/"), {"confirm": "yes", "version": "2"}).status_code
        == 403
    )
    assert api.get_run(failed_run.run_id).version == 1


def test_resume_on_version_is_offered_when_a_live_worker_registers_another_and_checks_the_version(
    staff_client, failed_run
):
    client = staff_client("view_run", "resume_run_on_version")
    live_worker([1])
    assert "Resume on another version" not in client.get(run_url(failed_run.run_id)).content.decode()
    live_worker([1, 2])
    assert "Resume on another version" in client.get(run_url(failed_run.run_id)).content.decode()
    url = run_url(failed_run.run_id, "resume_on_version/")
    refused = client.post(url, {"confirm": "yes", "version": "5"})
    assert refused.status_code == 200 and "no live worker registers version 5" in refused.content.decode()
    assert client.post(url, {"confirm": "yes", "version": "x"}).status_code == 200
    assert api.get_run(failed_run.run_id).status == "failed"
    assert client.post(url, {"confirm": "yes", "version": "2"}).status_code == 302
    resumed = api.get_run(failed_run.run_id)
    assert (resumed.status, resumed.version) == ("pending", 2)
