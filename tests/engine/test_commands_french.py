"""The commands speak the project's language: under French, their help, their arguments' help and the lines
they print read in French; stored values (run ids, statuses, outcome words) stay as stored."""

import logging
import uuid
from io import StringIO

import pytest
from django.core.management import call_command, load_command_class
from django.utils import translation

from durable_django import api
from durable_django.testing import run_until_idle

pytestmark = pytest.mark.django_db(transaction=True)


def call(*args: str) -> str:
    out = StringIO()
    with translation.override("fr"):
        call_command(*args, stdout=out)
    return out.getvalue()


def test_a_commands_help_and_its_arguments_help_read_in_french():
    command = load_command_class("durable_django", "durable_purge")
    with translation.override("fr"):
        text = " ".join(command.create_parser("manage.py", "durable_purge").format_help().split())
    assert "Supprime les exécutions terminées" in text and "par exemple 30d, 12h, 90m" in text
    assert "Delete finished runs" not in text
    # The next parser, in English, reads in English again.
    english = load_command_class("durable_django", "durable_purge").create_parser("manage.py", "durable_purge")
    assert "Delete finished runs" in " ".join(english.format_help().split())


def test_the_lines_a_command_prints_read_in_french_with_plural_forms():
    run = api.enqueue("tests.noop", {})
    output = call("durable_enqueue", "tests.noop", "{}")
    assert output.startswith("mise en file : tests.noop v1 [pending] ")
    assert "aucune exécution" in call("durable_runs", "--tenant", str(uuid.uuid4()))
    run_until_idle()
    assert call("durable_purge", "--older-than", "1d").strip() == "0 exécution supprimée"
    assert call("durable_cancel", run.run_id).strip() == f"exécution {run.run_id} : refused"


def test_the_worker_lines_read_in_french_with_plural_forms(caplog):
    caplog.set_level(logging.INFO, logger="durable_django.worker")
    run = api.enqueue("tests.noop", {})
    with translation.override("fr"):
        run_until_idle()
    assert f"exécution {run.run_id} (tests.noop v1) réussie à la prise en charge 1" in caplog.text
    assert "succeeded" not in caplog.text
