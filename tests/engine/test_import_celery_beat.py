"""durable_import_celery_beat against django-celery-beat's real tables: it prints, creates with --apply,
and never changes Celery's rows."""

import json
from io import StringIO

import django
import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

if django.VERSION >= (6, 1):  # django-celery-beat supports Django below 6.1; tox tests it beside Django 5.2
    pytest.importorskip("django_celery_beat", reason="django-celery-beat does not support Django 6.1")
from django_celery_beat.models import CrontabSchedule, IntervalSchedule, PeriodicTask

from durable_django.api.schedules import get_schedule, list_schedules
from tests.helpers import sql

pytestmark = pytest.mark.django_db(transaction=True)

CELERY_TABLES = [
    "django_celery_beat_periodictask",
    "django_celery_beat_crontabschedule",
    "django_celery_beat_intervalschedule",
    "django_celery_beat_periodictasks",
]


def celery_rows():
    return {table: sql(f"SELECT * FROM {table} ORDER BY 1") for table in CELERY_TABLES}


@pytest.fixture
def beat():
    monday = CrontabSchedule.objects.create(minute="0", hour="9", day_of_week="1", timezone="Europe/Berlin")
    five = IntervalSchedule.objects.create(every=5, period=IntervalSchedule.MINUTES)
    seven = IntervalSchedule.objects.create(every=7, period=IntervalSchedule.MINUTES)
    PeriodicTask.objects.create(
        name="report", task="app.tasks.report", crontab=monday, kwargs=json.dumps({"kind": "weekly"})
    )
    PeriodicTask.objects.create(name="ping", task="tests.noop", interval=five, args=json.dumps([1, 2]), enabled=False)
    PeriodicTask.objects.create(name="odd", task="tests.noop", interval=seven)
    PeriodicTask.objects.create(name="once", task="tests.noop", interval=five, one_off=True)


def run(*args):
    out = StringIO()
    call_command("durable_import_celery_beat", *args, stdout=out)
    return out.getvalue()


def test_without_apply_it_prints_the_schedules_and_writes_nothing(beat):
    before = celery_rows()
    output = run()
    assert "would create celery:ping: tests.noop at '*/5 * * * *' (UTC), disabled" in output
    assert "skip odd: an interval of every 7 minutes has no cron" in output
    assert "skip once: a one-off task" in output
    assert "skip report: no durable function 'app.tasks.report' is registered" in output
    assert output.splitlines()[-1] == "would create 1 schedule from 4 periodic tasks"
    assert list_schedules() == [] and celery_rows() == before


def test_apply_creates_the_mapped_schedules_and_leaves_celery_as_it_was(beat):
    before = celery_rows()
    output = run("--map", "app.tasks.report=tests.two_steps", "--apply")
    assert output.splitlines()[-1] == "created 2 schedules from 4 periodic tasks"
    report = get_schedule("celery:report")
    assert (report.name, report.cron, report.tz, report.input, report.enabled) == (
        "tests.two_steps", "0 9 * * 1", "Europe/Berlin", {"kind": "weekly"}, True,
    )  # fmt: skip
    ping = get_schedule("celery:ping")
    assert (ping.cron, ping.input, ping.enabled) == ("*/5 * * * *", {"args": [1, 2], "kwargs": {}}, False)
    # Again: the schedules exist, nothing is changed.
    again = run("--map", "app.tasks.report=tests.two_steps", "--apply")
    assert "left celery:report alone" in again and again.splitlines()[-1] == "created 0 schedules from 4 periodic tasks"
    assert celery_rows() == before


def test_a_bad_map_is_a_one_line_error(beat):
    with pytest.raises(CommandError, match="--map takes TASK=FUNCTION"):
        run("--map", "no-equals-sign")
    assert list_schedules() == []
