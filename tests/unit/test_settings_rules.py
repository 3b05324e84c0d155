"""Every DURABLE key has a rule with a stable check id; an unknown key is a warning naming the closest one."""

import math
import os
import subprocess
import sys
from datetime import timedelta

import pytest

from durable_django.checks import check_settings
from durable_django.conf import DurableSettings
from durable_django.settings_rules import RULES, known_keys
from tests.helpers import ROOT


def ids(settings, **keys):
    settings.DURABLE = {**settings.DURABLE, **keys}
    return [message.id for message in check_settings()]


def test_every_key_of_the_settings_has_a_rule_and_the_defaults_pass(settings):
    assert set(RULES) == set(known_keys()) == {key for key in vars(DurableSettings) if key.isupper()}
    settings.DURABLE = {}
    assert check_settings() == []


@pytest.mark.parametrize(
    ("key", "value", "check_id"),
    [
        ("LEASE_SECONDS", math.nan, "durable_django.E002"),
        ("LEASE_SECONDS", math.inf, "durable_django.E002"),
        ("LEASE_SECONDS", 0, "durable_django.E002"),
        ("POLL_SECONDS", math.nan, "durable_django.E004"),
        ("DEFAULT_RETRY", {"max_attempts": 2**31}, "durable_django.E005"),
        ("DEFAULT_RETRY", {"backoff": math.nan}, "durable_django.E005"),
        ("DEFAULT_RETRY", [1, 2], "durable_django.E005"),
        ("MAX_RECOVERIES", 2**31, "durable_django.E006"),
        ("DATABASE", ["default"], "durable_django.E003"),
        ("SCHEDULES", [], "durable_django.E007"),
        ("PURGE_AFTER", math.nan, "durable_django.E008"),
        ("QUEUES", {"emails": {"concurrency": 2**41}}, "durable_django.E010"),
        ("QUEUES", {"emails": {"rate_limit": (5, math.nan)}}, "durable_django.E010"),
        ("QUEUES", {"q" * 513: {"concurrency": 1}}, "durable_django.E010"),
        ("SUMMARY_SECONDS", "60", "durable_django.E011"),
        ("RECONCILE_SECONDS", math.nan, "durable_django.E012"),
        ("RECONCILE_SECONDS", "60", "durable_django.E012"),
        ("MAX_VALUE_BYTES", 2**40, "durable_django.E013"),
        ("MAX_VALUE_BYTES", 0, "durable_django.E013"),
        ("METRICS_ADDRESS", "0.0.0.0\x00", "durable_django.E020"),
        ("ENGINE_CONNECTIONS", 2**31, "durable_django.E030"),
        ("LISTEN_DATABASE", {"alias": "direct"}, "durable_django.E201"),
        ("READ_DATABASE", 7, "durable_django.E203"),
        ("PREPARED_STATEMENTS", 1, "durable_django.E204"),
    ],
)
def test_a_value_of_the_wrong_type_nan_or_out_of_range_is_an_error(settings, key, value, check_id):
    assert ids(settings, **{key: value}) == [check_id]


@pytest.mark.parametrize(
    ("key", "value"),
    [("LEASE_SECONDS", 2.5), ("PURGE_AFTER", timedelta(days=30)), ("PURGE_AFTER", None), ("MAX_VALUE_BYTES", 1024)],
)
def test_valid_values_pass(settings, key, value):
    assert ids(settings, **{key: value}) == []


def test_an_unknown_key_is_a_warning_that_names_the_closest_known_one(settings):
    settings.DURABLE = {**settings.DURABLE, "LEASE_SECOND": 30, "PURGE_AFTR": None}
    warnings = sorted(check_settings(), key=lambda message: message.msg)
    assert [message.id for message in warnings] == ["durable_django.W015", "durable_django.W015"]
    assert ["LEASE_SECOND" in warnings[0].msg, "PURGE_AFTR" in warnings[1].msg] == [True, True]
    assert [warnings[0].hint, warnings[1].hint] == ["Did you mean 'LEASE_SECONDS'?", "Did you mean 'PURGE_AFTER'?"]
    assert not any(message.is_serious() for message in warnings)


def test_durable_not_a_dict_is_an_error(settings):
    settings.DURABLE = [("LEASE_SECONDS", 30)]
    assert [message.id for message in check_settings()] == ["durable_django.E014"]


@pytest.mark.parametrize(
    ("key", "value", "check_id"),
    [
        ("LEASE_SECONDS", "float('nan')", "E002"),
        ("QUEUES", "{'emails': {'concurrency': 2**41}}", "E010"),
        ("SUMMARY_SECONDS", "'60'", "E011"),
        ("RECONCILE_SECONDS", "float('nan')", "E012"),
    ],
)
def test_durable_worker_refuses_to_start_on_an_invalid_value_even_with_checks_skipped(tmp_path, key, value, check_id):
    (tmp_path / "broken_settings.py").write_text(
        f"from tests.settings import *\nDURABLE = {{**DURABLE, {key!r}: {value}}}\n"
    )
    process = subprocess.run(
        [sys.executable, "-m", "django", "durable_worker", "--burst", "--skip-checks", "--settings", "broken_settings"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, str(tmp_path)])},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert process.returncode == 1, process.stderr
    assert process.stderr.startswith("CommandError: ") and "Traceback" not in process.stderr
    assert f"durable_django.{check_id}" in process.stderr and f"DURABLE[{key!r}]" in process.stderr
