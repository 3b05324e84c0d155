"""The models only read: every write through them raises before reaching the database."""

import pytest

from durable_django.exceptions import ReadOnlyRecord
from durable_django.models import Run, Schedule, Signal, Step


@pytest.mark.parametrize(
    "write",
    [
        lambda: Run.objects.create(run_id="x", name="tests.noop", status="pending"),
        lambda: Run.objects.get_or_create(run_id="x"),
        lambda: Run.objects.update_or_create(run_id="x"),
        lambda: Run.objects.bulk_create([Run(run_id="x")]),
        lambda: Run.objects.filter(status="pending").update(status="cancelled"),
        lambda: Run.objects.filter(status="pending").delete(),
        lambda: Run(run_id="x", name="tests.noop", status="pending").save(),
        lambda: Run(run_id="x").delete(),
        lambda: Step.objects.create(run_id="x", step_id="v1:a:0", result=1),
        lambda: Signal.objects.filter(run_id="x").delete(),
        lambda: Schedule(schedule_id=":x").save(),
        lambda: Schedule.objects.all().update(enabled=False),
    ],
    ids=[
        "create",
        "get_or_create",
        "update_or_create",
        "bulk_create",
        "update",
        "delete",
        "save",
        "instance-delete",
        "step-create",
        "signal-delete",
        "schedule-save",
        "schedule-update",
    ],
)
def test_writing_through_a_model_is_refused_before_the_database(write):
    with pytest.raises(ReadOnlyRecord, match="written by durable_django's client API only"):
        write()  # no django_db mark: reaching the database would fail the test differently
