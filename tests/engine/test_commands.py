"""The operator commands, over the client API."""

import argparse
import uuid
from io import StringIO

import django
import pytest
from django.core.management import CommandError, call_command, get_commands, load_command_class

import durable_django
from durable_django import api
from durable_django.testing import run_until_idle
from tests.helpers import sql

pytestmark = pytest.mark.django_db(transaction=True)


def call(*args):
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def test_enqueue_prints_the_run_id_last_and_runs_list_it():
    tenant = str(uuid.uuid4())
    output = call("durable_enqueue", "tests.noop", '{"a": 1}', "--idempotency-key", "k", "--tenant", tenant)
    run_id = output.split()[-1]
    run = api.get_run(run_id, tenant_id=tenant)
    assert run.input == {"a": 1} and run.idempotency_key == "k"
    assert run_id in call("durable_runs", "--status", "pending")
    assert "no runs" in call("durable_runs", "--status", "pending", "--tenant", str(uuid.uuid4()))


def test_signal_cancel_and_resume_commands():
    run = api.enqueue("tests.signal_waiter", {})
    run_until_idle()
    assert '"yes"' in call("durable_signal", run.run_id, "approval", '"yes"')
    blocked = api.enqueue("tests.noop", {})
    assert "cancelled" in call("durable_cancel", blocked.run_id)
    assert "pending" in call("durable_resume", blocked.run_id)


@pytest.mark.parametrize(
    "args",
    [
        ("durable_enqueue", "tests.nobody"),
        ("durable_enqueue", "tests.noop", "{not json"),
        ("durable_cancel", str(uuid.uuid4())),
        ("durable_resume", str(uuid.uuid4())),
        ("durable_signal", str(uuid.uuid4()), "approval"),
        ("durable_cancel", "x", "--tenant", "not-a-uuid"),
        ("durable_purge", "--older-than", "soon"),
        ("durable_purge", "--older-than", "99999999999d"),
        ("durable_cancel", "run\x00id"),
        ("durable_enqueue", "tests.noop", '{"text": "a\\u0000b"}'),
    ],
)
def test_bad_input_or_an_unknown_run_is_a_message_and_a_failure(args):
    # Runs a mistaken command could touch: one waiting for the signal "approval", one finished long ago.
    api.enqueue("tests.signal_waiter", {})
    api.enqueue("tests.noop", {})
    run_until_idle()
    sql("UPDATE durable_run SET updated_at = now() - interval '60 days' WHERE name = 'tests.noop'")
    before = api.list_runs().items
    assert sorted(run.status for run in before) == ["succeeded", "waiting"]
    with pytest.raises(CommandError):
        call(*args)
    assert api.list_runs().items == before  # nothing added, nothing changed


def test_purge_command_deletes_old_finished_runs():
    run = api.enqueue("tests.noop", {})
    run_until_idle()
    assert call("durable_purge", "--older-than", "1d").strip() == "purged 0 runs"
    from tests.helpers import sql

    sql("UPDATE durable_run SET updated_at = now() - interval '2 days'")
    assert call("durable_purge", "--older-than", "1d", "--batch-size", "10").strip() == "purged 1 run"
    assert api.get_run(run.run_id) is None


COMMANDS = sorted(name for name, app in get_commands().items() if app == "durable_django")


@pytest.mark.parametrize("name", COMMANDS)
def test_every_command_names_the_packages_release_for_version(name, capsys):
    parser = load_command_class("durable_django", name).create_parser("manage.py", name)
    [version] = [action for action in parser._actions if "--version" in action.option_strings]
    if not isinstance(version, argparse._VersionAction):
        pytest.skip(f"{name}'s --version is a function version (its own option)")
    with pytest.raises(SystemExit):
        parser.parse_args(["--version"])
    expected = f"durable-django {durable_django.__version__} (Django {django.get_version()})"
    assert capsys.readouterr().out.strip() == expected
