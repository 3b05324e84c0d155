"""fork() from a step or whole, and resume() on another version: replayed journals, typed refusals."""

import io
import os

import pytest
from django.core.management import CommandError, call_command

from durable_django import api
from durable_django.exceptions import InvalidInput, RunNotFound, UnknownFunction
from durable_django.testing import run_until_idle
from tests.helpers import sql
from tests.workflows import effects

pytestmark = pytest.mark.django_db(transaction=True)


def journal(run_id):
    return dict(sql("SELECT step_id, result::text FROM durable_step WHERE run_id = %s", [run_id]))


@pytest.fixture
def failed_at_c():
    """A run of tests.forkable v1 that journalled a, its child and b, then failed at step c."""
    effects.touch("forkable-c-broken")
    run = api.enqueue("tests.forkable", {"n": 1}, version=1)
    run_until_idle()
    assert api.get_run(run.run_id).status == "failed"
    os.remove(effects._path("forkable-c-broken"))
    return api.get_run(run.run_id)


def test_a_fork_from_a_step_replays_what_came_before_it_and_executes_from_there(failed_at_c):
    before = journal(failed_at_c.run_id)
    fork = api.fork(failed_at_c.run_id, from_step="b")
    assert fork.run_id != failed_at_c.run_id
    assert (fork.name, fork.version, fork.input, fork.status) == ("tests.forkable", 1, {"n": 1}, "pending")
    assert fork.forked_from == {"run_id": failed_at_c.run_id, "step": "b"}
    assert sorted(journal(fork.run_id)) == ["v1:a:0", "v1:child:0"]
    run_until_idle()
    done = api.get_run(fork.run_id)
    assert done.status == "succeeded", done.error
    # a replayed (executed once, by the original), b and c executed by the fork.
    assert (effects.count("forkable-a"), effects.count("forkable-b"), effects.count("forkable-c")) == (1, 2, 1)
    # The copied spawn kept its child: the fork waited for it and got its result.
    child_id = journal(failed_at_c.run_id)["v1:child:0"].strip('"')
    child = api.get_run(child_id)
    assert child.parent_run_id == failed_at_c.run_id and not child.is_live
    assert (done.output["child"]["state"], done.output["child"]["result"]) == (child.status, child.output)
    # The original is unchanged.
    assert journal(failed_at_c.run_id) == before and api.get_run(failed_at_c.run_id).status == "failed"
    assert api.get_run(failed_at_c.run_id).forked_from is None


def test_a_whole_fork_on_another_version_replays_the_whole_journal_on_that_versions_code(failed_at_c):
    fork = api.fork(failed_at_c.run_id, version=2)
    assert fork.version == 2 and fork.forked_from == {"run_id": failed_at_c.run_id, "step": None}
    assert sorted(journal(fork.run_id)) == ["v2:a:0", "v2:b:0", "v2:child:0"]
    run_until_idle()
    assert api.get_run(fork.run_id).output["c"] == "c2"
    assert (effects.count("forkable-a"), effects.count("forkable-b")) == (1, 1)


def test_resume_on_another_version_keeps_the_journal_and_runs_the_rest_on_that_version(failed_at_c):
    resumed = api.resume(failed_at_c.run_id, version=2)
    assert (resumed.status, resumed.version) == ("pending", 2)
    assert sorted(journal(failed_at_c.run_id)) == ["v2:a:0", "v2:b:0", "v2:child:0"]
    run_until_idle()
    done = api.get_run(failed_at_c.run_id)
    assert (done.status, done.output["c"]) == ("succeeded", "c2")
    assert (effects.count("forkable-a"), effects.count("forkable-b"), effects.count("forkable-c")) == (1, 1, 1)


def test_bad_forks_and_resumes_are_typed_errors_and_write_nothing(failed_at_c):
    runs_before = sql("SELECT count(*) FROM durable_run")
    with pytest.raises(RunNotFound):
        api.fork("no-such-run")
    with pytest.raises(InvalidInput, match="holds no step 'nope'"):
        api.fork(failed_at_c.run_id, from_step="nope")
    with pytest.raises(InvalidInput):
        api.fork(failed_at_c.run_id, from_step="")
    with pytest.raises(UnknownFunction, match="version 7"):
        api.fork(failed_at_c.run_id, version=7)
    with pytest.raises(InvalidInput):
        api.fork(failed_at_c.run_id, version="2")
    with pytest.raises(RunNotFound):
        api.fork(failed_at_c.run_id, tenant_id="aaaaaaaa-aaaa-aaaa-aaaa-aaaaaaaaaaaa")
    with pytest.raises(UnknownFunction):
        api.resume(failed_at_c.run_id, version=7)
    with pytest.raises(RunNotFound):
        api.resume("no-such-run", version=2)
    live = api.enqueue("tests.forkable", {"n": 2}, version=1)
    with pytest.raises(InvalidInput, match="only failed, cancelled or parked"):
        api.resume(live.run_id, version=2)
    assert sql("SELECT count(*) FROM durable_run") == [(runs_before[0][0] + 1,)]
    assert api.get_run(live.run_id).version == 1
    assert api.get_run(failed_at_c.run_id).version == 1 and "v1:a:0" in journal(failed_at_c.run_id)


def command(*args):
    out = io.StringIO()
    call_command(*args, stdout=out)
    return out.getvalue().strip()


def test_the_fork_and_resume_commands(failed_at_c):
    printed = command("durable_fork", failed_at_c.run_id, "--from-step", "b", "--version", "2")
    fork_id = printed.split()[1].rstrip(":")
    assert printed.endswith(f"pending, forked from {failed_at_c.run_id} (version 2)")
    assert api.get_run(fork_id).forked_from == {"run_id": failed_at_c.run_id, "step": "b"}
    with pytest.raises(CommandError, match="holds no step"):
        command("durable_fork", failed_at_c.run_id, "--from-step", "zzz")
    with pytest.raises(CommandError, match="registers"):
        command("durable_resume", failed_at_c.run_id, "--version", "9")
    assert (
        command("durable_resume", failed_at_c.run_id, "--version", "2")
        == f"run {failed_at_c.run_id}: pending, version 2"
    )
