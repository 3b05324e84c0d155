"""Django Tasks on DurableBackend, executed by real durable_worker subprocesses.

Runs under Django 6 (django.tasks) and Django 5.2 (the django_tasks backport).
"""

import math
import os
import sys
from datetime import datetime, timedelta

import pytest
from asgiref.sync import async_to_sync
from django.conf import settings
from django.db import connection, transaction
from django.test import override_settings
from django.utils import timezone

from durable_django import RetryPolicy, api
from durable_django.contrib.tasks.compat import InvalidTask, TaskResultDoesNotExist, TaskResultStatus
from durable_django.contrib.tasks.paths import TaskPathError
from durable_django.engine import submit
from durable_django.exceptions import Cancelled, InvalidInput
from durable_django.states import CancelOutcome
from durable_django.submission import RunOptions
from durable_django.tasks import DurableBackend
from durable_django.testing import run_until_idle
from tests.helpers import sql, wait_until
from tests.workflows import tasks

try:
    from django.tasks import default_task_backend, task, task_backends
except ImportError:
    from django_tasks import default_task_backend, task, task_backends

with_db = pytest.mark.django_db(transaction=True)


def lines(name):
    """The lines a fixture task or signal receiver appended to an effects file."""
    path = os.path.join(os.environ["DURABLE_TEST_EFFECTS_DIR"], name)
    if not os.path.exists(path):
        return []
    with open(path) as handle:
        return handle.read().splitlines()


def count_runs():
    return sql("SELECT count(*) FROM durable_run")[0][0]


def run_burst(workers):
    """One worker that runs everything claimable now, one at a time, then exits."""
    proc = workers.start("--concurrency", "1", "--burst")
    assert proc.wait(timeout=120) == 0, workers.output(proc)


def finished(task_obj, result_id, timeout=60):
    return wait_until(
        lambda: (r := task_obj.get_result(result_id)).is_finished and r,
        timeout=timeout,
        message=f"task result {result_id} to finish",
    )


@pytest.mark.process
@with_db
def test_a_task_is_an_ordinary_run_that_a_worker_executes_and_reads_back_successful(workers):
    enqueued = tasks.add.enqueue(2, 3)
    assert enqueued.status == TaskResultStatus.READY and enqueued.backend == "default"
    run = api.get_run(enqueued.id)
    assert (run.name, run.version, run.input, run.status) == (
        "tests.workflows.tasks.add",
        0,
        {"args": [2, 3], "kwargs": {}},
        "pending",
    )
    assert enqueued.enqueued_at == run.created_at and enqueued.attempts == 0

    run_burst(workers)

    result = tasks.add.get_result(enqueued.id)
    run = api.get_run(enqueued.id)
    assert result.status == TaskResultStatus.SUCCESSFUL and result.return_value == 5
    assert (result.args, result.kwargs, result.errors) == ([2, 3], {}, [])
    assert result.attempts == 1 and result.worker_ids == [run.worker_id] and run.worker_id
    assert result.enqueued_at == run.created_at and result.started_at == run.started_at
    assert result.finished_at == run.finished_at
    assert result.enqueued_at <= result.started_at <= result.last_attempted_at <= result.finished_at
    enqueued.refresh()
    assert enqueued.status == TaskResultStatus.SUCCESSFUL and enqueued.return_value == 5
    assert async_to_sync(default_task_backend.aget_result)(enqueued.id).return_value == 5
    assert lines("signals") == [
        f"enqueued {enqueued.id} READY 0",
        f"started {enqueued.id} RUNNING 1",
        f"finished {enqueued.id} SUCCESSFUL 1",
    ]


@pytest.mark.process
@with_db
def test_a_failing_task_reads_back_failed_with_its_exception_class_and_traceback(workers):
    enqueued = tasks.explode.enqueue("boom")  # its own RetryPolicy(max_attempts=1)
    run_burst(workers)
    result = tasks.explode.get_result(enqueued.id)
    assert result.status == TaskResultStatus.FAILED and result.attempts == 1
    [error] = result.errors
    assert error.exception_class_path == "builtins.ValueError" and error.exception_class is ValueError
    assert error.traceback.startswith("Traceback") and "ValueError: boom" in error.traceback
    assert error.traceback.endswith("ValueError: boom\n")  # the newline Django's own backends keep
    assert "def explode" not in error.traceback and "raise ValueError(message)" in error.traceback
    assert result.finished_at is not None
    with pytest.raises(ValueError, match="Task failed"):
        result.return_value
    assert lines("signals")[-1] == f"finished {enqueued.id} FAILED 1"


@pytest.mark.process
@with_db
def test_the_backend_options_retry_policy_retries_a_failing_task_then_fails_it(workers):
    enqueued = tasks.always_fails.enqueue()  # OPTIONS["retry"]: max_attempts=3, 50 ms apart
    workers.start("--concurrency", "1")
    result = finished(tasks.always_fails, enqueued.id)
    assert result.status == TaskResultStatus.FAILED and result.attempts == 3
    assert len(lines("always-fails")) == 3
    # Every failed attempt's error, oldest first, as Django's errors list is.
    assert [e.exception_class_path for e in result.errors] == ["builtins.KeyError"] * 3
    assert all(e.traceback.startswith("Traceback") for e in result.errors)
    assert api.get_run(enqueued.id).retry_policy.max_attempts == 3
    statuses = [line.split()[2] for line in lines("signals") if line.startswith("finished")]
    assert statuses == ["READY", "READY", "FAILED"]


@pytest.mark.process
@with_db
def test_a_task_taking_context_sees_attempt_2_on_its_retry(workers):
    enqueued = tasks.flaky_with_context.enqueue(succeed_on=2)
    workers.start("--concurrency", "1")
    result = finished(tasks.flaky_with_context, enqueued.id)
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == {"attempt": 2, "result_id": enqueued.id}
    assert lines("context-attempt") == ["1", "2"]
    assert result.attempts == 2 and len(result.worker_ids) == 2 and all(result.worker_ids)
    # The first attempt's failure is kept with the result, as Django's errors list is.
    assert [e.exception_class_path for e in result.errors] == ["builtins.RuntimeError"]
    assert result.kwargs == {"succeed_on": 2} and result.args == []
    rid = enqueued.id
    assert lines("signals") == [
        f"enqueued {rid} READY 0",
        f"started {rid} RUNNING 1",
        f"finished {rid} READY 1",
        f"started {rid} RUNNING 2",
        f"finished {rid} SUCCESSFUL 2",
    ]


@pytest.mark.process
@with_db
def test_run_after_defers_a_task_until_its_time(workers):
    later_at = timezone.now() + timedelta(hours=1)
    soon_at = timezone.now() + timedelta(seconds=2)
    later = tasks.add.using(run_after=later_at).enqueue(1, 1)
    soon = tasks.add.using(run_after=soon_at).enqueue(2, 2)
    assert api.get_run(soon.id).available_at == soon_at
    workers.start("--concurrency", "2")
    result = finished(tasks.add, soon.id)
    assert result.status == TaskResultStatus.SUCCESSFUL and result.started_at >= soon_at
    waiting = tasks.add.get_result(later.id)
    assert waiting.status == TaskResultStatus.READY and waiting.attempts == 0
    assert waiting.started_at is None and waiting.last_attempted_at is None
    assert waiting.task.run_after == later_at


@pytest.mark.process
@with_db
def test_priority_orders_claims(workers):
    for tag, priority in [("low", -10), ("mid", 0), ("high", 50), ("top", 100), ("bottom", -100)]:
        tasks.record_order.using(priority=priority).enqueue(tag)
    run_burst(workers)
    assert lines("order") == ["top", "high", "mid", "low", "bottom"]
    assert sorted(sql("SELECT priority FROM durable_run")) == [(-100,), (-10,), (0,), (50,), (100,)]


@pytest.mark.process
@with_db
def test_an_async_task_runs_and_is_enqueued_and_read_asynchronously(workers):
    enqueued = async_to_sync(tasks.multiply_later.aenqueue)(6, y=7)
    run_burst(workers)
    result = async_to_sync(tasks.multiply_later.aget_result)(enqueued.id)
    assert result.status == TaskResultStatus.SUCCESSFUL and result.return_value == {"product": 42}
    assert (result.args, result.kwargs) == ([6], {"y": 7})
    assert [line.split()[0] for line in lines("signals")] == ["enqueued", "started", "finished"]


@pytest.mark.process
@with_db
def test_a_return_value_json_cannot_hold_fails_the_task_with_djangos_error(workers):
    enqueued = tasks.returns_a_set.enqueue()
    workers.start("--concurrency", "1")
    result = finished(tasks.returns_a_set, enqueued.id)
    assert result.status == TaskResultStatus.FAILED
    assert result.errors[0].exception_class_path == "builtins.TypeError"
    assert "Unsupported type" in result.errors[0].traceback


@pytest.mark.process
@with_db
def test_a_running_task_cancelled_reads_back_failed_with_a_cancellation_error(workers):
    enqueued = tasks.sleepy.enqueue(60)
    workers.start("--concurrency", "1", DURABLE_TEST_LEASE_SECONDS="3")
    wait_until(lambda: lines("sleepy-started"), message="the task to start")
    assert api.cancel(enqueued.id) == CancelOutcome.REQUESTED
    result = finished(tasks.sleepy, enqueued.id, timeout=30)
    assert result.status == TaskResultStatus.FAILED
    assert api.get_run(enqueued.id).status == "cancelled"
    assert result.errors[-1].exception_class is Cancelled
    # The heartbeat lands the run, then stops the task's thread, which sends task_finished.
    wait_until(lambda: lines("signals")[-1] == f"finished {enqueued.id} FAILED 1", message="task_finished")


@with_db
def test_a_pending_task_cancelled_reads_back_failed_with_a_cancellation_error():
    enqueued = tasks.add.using(run_after=timezone.now() + timedelta(hours=1)).enqueue(1, 2)
    assert api.cancel(enqueued.id) == CancelOutcome.CANCELLED
    result = tasks.add.get_result(enqueued.id)
    assert result.status == TaskResultStatus.FAILED and result.is_finished
    [error] = result.errors
    assert error.exception_class_path == "durable_django.exceptions.Cancelled"
    assert error.exception_class is Cancelled and "cancelled" in error.traceback
    assert error.traceback.endswith("\n")
    assert result.finished_at is not None and result.attempts == 0
    with pytest.raises(ValueError, match="Task failed"):
        result.return_value


@with_db
@pytest.mark.parametrize(
    "args, kwargs, error, message",
    [
        ((datetime(2030, 1, 1),), {}, TypeError, "Unsupported type"),
        ((), {"thing": object()}, TypeError, "Unsupported type"),
        (({1: "one"},), {}, ValueError, "round trip"),
        ((math.nan,), {}, ValueError, "Out of range float"),
        ((), {"big": math.inf}, ValueError, "Out of range float"),
    ],
)
def test_arguments_that_are_not_json_round_trippable_are_refused_writing_nothing(args, kwargs, error, message):
    with pytest.raises(error, match=message):
        tasks.add.enqueue(*args, **kwargs)
    assert count_runs() == 0
    assert lines("signals") == []


@with_db
def test_enqueue_takes_part_in_the_callers_transaction():
    with pytest.raises(RuntimeError), transaction.atomic():
        tasks.add.enqueue(1, 2)
        raise RuntimeError("roll back")
    assert count_runs() == 0
    with transaction.atomic():
        kept = tasks.add.enqueue(1, 2)
    assert api.get_run(kept.id).status == "pending"


@with_db
def test_run_until_idle_executes_task_runs_in_process_for_a_projects_tests():
    sync = tasks.flaky_with_context.enqueue(succeed_on=1)
    asynchronous = tasks.multiply_later.enqueue(3, 4)
    assert run_until_idle() == 2
    assert tasks.flaky_with_context.get_result(sync.id).return_value == {"attempt": 1, "result_id": sync.id}
    assert api.wait_for_result(asynchronous.id, timeout=10).output == {"product": 12}
    assert tasks.multiply_later.get_result(asynchronous.id).worker_ids == ["inline"]


@with_db
def test_an_invalid_queue_name_or_priority_is_refused_and_a_listed_queue_is_used():
    with pytest.raises(InvalidTask, match="Queue 'nowhere' is not valid"):
        tasks.add.using(queue_name="nowhere")
    with pytest.raises(InvalidTask, match="priority"):
        tasks.add.using(priority=101)
    assert count_runs() == 0
    enqueued = tasks.add.using(queue_name="reports", priority=-7).enqueue(1, 2)
    run = api.get_run(enqueued.id)
    assert (run.queue, run.priority) == ("reports", -7)
    result = tasks.add.get_result(enqueued.id)
    assert (result.task.queue_name, result.task.priority) == ("reports", -7)


@with_db
def test_a_task_whose_path_does_not_lead_back_to_it_is_refused_at_enqueue():
    stray = task(tasks.plain_function)  # the module name still points to the plain function
    with pytest.raises(InvalidTask, match="not a Django task"):
        stray.enqueue()
    assert count_runs() == 0


def stored_task_run(path: str):
    """A version-0 run naming ``path``, made the way the backend makes one (only it may)."""
    return submit.submit(submit.task_request(path, {"args": [], "kwargs": {}}, RunOptions()))


@with_db
def test_the_client_api_cannot_make_a_task_run():
    with pytest.raises(InvalidInput, match="version 0 is reserved"):
        api.enqueue("tests.workflows.tasks.plain_function", {"args": [], "kwargs": {}}, version=0)
    assert count_runs() == 0


@with_db
def test_a_stored_task_path_outside_the_installed_apps_is_never_imported(effects_dir):
    run = stored_task_run("tests.untrusted.job")
    run_until_idle()
    failed = api.get_run(run.run_id)
    assert (failed.status, failed.error_type) == ("failed", "durable_django.contrib.tasks.paths.TaskPathError")
    assert "not inside an installed app" in failed.error
    assert "tests.untrusted" not in sys.modules
    assert lines("untrusted-module-imported") == [] and lines("untrusted-job-ran") == []


@pytest.mark.process
@with_db
def test_a_run_whose_path_does_not_import_or_is_no_task_fails_with_a_clear_error(workers):
    missing = stored_task_run("tests.workflows.no_such_module.job")
    not_a_task = stored_task_run("tests.workflows.tasks.plain_function")
    run_burst(workers)
    for run_id, why in [(missing.run_id, "does not import"), (not_a_task.run_id, "not a Django task")]:
        run = api.get_run(run_id)
        assert (run.status, run.attempts) == ("failed", 1)
        assert run.error_type == "durable_django.contrib.tasks.paths.TaskPathError" and why in run.error
    assert lines("plain-function-called") == []
    with pytest.raises(TaskPathError, match="does not import"):
        default_task_backend.get_result(missing.run_id)


@with_db
def test_get_result_of_an_unknown_id_or_a_durable_function_run_does_not_exist():
    with pytest.raises(TaskResultDoesNotExist):
        default_task_backend.get_result("no-such-run")
    durable_run = api.enqueue("tests.noop", {})
    with pytest.raises(TaskResultDoesNotExist):
        default_task_backend.get_result(durable_run.run_id)


def test_validate_task_and_backend_setup_touch_no_database():
    # No django_db mark: pytest-django makes any database access here an error.
    with pytest.raises(RuntimeError, match="Database access not allowed"):
        connection.ensure_connection()
    backend = task_backends["default"]
    assert isinstance(backend, DurableBackend)
    declared = task(priority=5, queue_name="reports")(tasks.plain_function)
    backend.validate_task(declared)
    assert declared.using(priority=-3, run_after=timezone.now()).priority == -3
    with pytest.raises(InvalidTask, match="takes context"):
        task(takes_context=True)(tasks.plain_function)
    with pytest.raises(InvalidTask, match="RetryPolicy"):
        task(tasks.plain_function).using(retry={"max_attempts": 2})
    assert backend.supports_defer and backend.supports_priority
    assert backend.supports_async_task and backend.supports_get_result


@pytest.mark.skipif(
    not tasks.DECORATOR_TAKES_OPTIONS,
    reason="@task(retry=...) needs a decorator that passes extra keywords to the task class "
    "(Django 6.1 or the django-tasks backport; Django 6.0's takes its own keywords only)",
)
def test_the_task_decorator_declares_a_retry_policy_and_refuses_another_type():
    policy = RetryPolicy(max_attempts=4)
    declared = task(retry=policy, priority=2)(tasks.plain_function)
    assert declared.retry == policy and declared.using(priority=3).retry == policy
    with pytest.raises(InvalidTask, match="RetryPolicy"):
        task(retry={"max_attempts": 2})(tasks.plain_function)


def test_using_sets_a_retry_policy_on_every_django_and_keeps_it_through_later_usings():
    plain = task(tasks.plain_function)
    assert plain.retry is None
    policy = RetryPolicy(max_attempts=4, initial_delay=0.5)
    declared = plain.using(retry=policy, queue_name="reports")
    assert (declared.retry, declared.queue_name, plain.retry) == (policy, "reports", None)
    again = declared.using(priority=7)
    assert (again.retry, again.priority, again.queue_name) == (policy, 7, "reports")
    assert again.using(retry=RetryPolicy(max_attempts=2)).retry.max_attempts == 2


def test_the_backend_check_wants_durable_django_installed():
    assert list(task_backends["default"].check()) == []
    without = [app for app in settings.INSTALLED_APPS if app != "durable_django"]
    with override_settings(INSTALLED_APPS=without):
        [error] = DurableBackend("other", {}).check()
    assert error.id == "durable_django.E101"


def test_unknown_or_invalid_options_are_a_configuration_error():
    from django.core.exceptions import ImproperlyConfigured

    with pytest.raises(ImproperlyConfigured, match="unknown keys"):
        DurableBackend("custom", {"BACKEND": "durable_django.tasks.DurableBackend", "OPTIONS": {"retries": 3}})
    with pytest.raises(ImproperlyConfigured, match="retry"):
        DurableBackend("custom", {"OPTIONS": {"retry": {"max_attempts": 0}}})
    for not_a_policy in (0, "", [], "fast", 3):  # neither a RetryPolicy nor a dict of its fields
        with pytest.raises(ImproperlyConfigured, match=r"OPTIONS'\]\['retry'\]"):
            DurableBackend("custom", {"OPTIONS": {"retry": not_a_policy}})
    backend = DurableBackend("custom", {"OPTIONS": {"retry": {"max_attempts": 7}}})
    assert backend.retry.max_attempts == 7


@with_db
def test_a_broken_tasks_alias_leaves_claims_and_the_other_aliases_limits_working(caplog):
    from durable_django.contrib.tasks.backend import declared_queue_limits

    broken = {
        **settings.TASKS,
        "limited": {
            "BACKEND": "durable_django.tasks.DurableBackend",
            "QUEUES": ["default"],
            "OPTIONS": {"queues": {"default": {"concurrency": 7}}},
        },
        "typo": {"BACKEND": "durable_django.tasks.DurableBackendd"},
        "bad_options": {"BACKEND": "durable_django.tasks.DurableBackend", "OPTIONS": {"retyr": {}}},
    }
    with override_settings(TASKS=broken):
        assert declared_queue_limits()["default"].concurrency == 7
        run = api.enqueue("tests.noop", {"claimed": True})
        run_until_idle()
        assert api.get_run(run.run_id).status == "succeeded"
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert "TASKS['typo']" in logged and "TASKS['bad_options']" in logged
