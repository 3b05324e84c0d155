"""The Django Tasks backend's doors: unstorable arguments and impossible result ids."""

import pytest
from django.db import transaction

from durable_django.contrib.tasks.compat import TaskResultDoesNotExist
from tests.helpers import sql
from tests.workflows import tasks

try:
    from django.tasks import default_task_backend
except ImportError:
    from django_tasks import default_task_backend

pytestmark = pytest.mark.django_db(transaction=True)

SURROGATE = "\udcff"


def nested(depth):
    value = 0
    for _ in range(depth):
        value = [value]
    return value


def count_runs():
    return sql("SELECT count(*) FROM durable_run")[0][0]


@pytest.mark.parametrize(
    "args",
    [(f"a{SURROGATE}", "b"), ({f"key{SURROGATE}": 1}, 2), ("a\x00", "b"), ("x" * (65 * 2**20), 1), (nested(5000), 1)],
    ids=["surrogate", "surrogate-key", "nul", "over-max-value-bytes", "deep"],
)
def test_unstorable_arguments_are_a_value_error_that_leaves_the_callers_transaction_usable(args):
    with transaction.atomic():
        with pytest.raises(ValueError, match="Unsupported value in the arguments"):
            tasks.add.enqueue(*args)
        kept = tasks.add.enqueue(1, 2)  # the transaction was not aborted by a refused statement
    assert count_runs() == 1 and tasks.add.get_result(kept.id).args == [1, 2]


@pytest.mark.parametrize(
    "result_id",
    ["run\x00", f"run{SURROGATE}", "not-a-run", "x" * 10_000, "", "00000000-0000-0000-0000-000000000000"],
    ids=["nul", "surrogate", "garbage", "huge", "empty", "unknown-uuid"],
)
def test_get_result_of_an_impossible_id_is_task_result_does_not_exist(result_id):
    with transaction.atomic():
        with pytest.raises(TaskResultDoesNotExist):
            default_task_backend.get_result(result_id)
        assert sql("SELECT 1") == [(1,)]  # and the caller's transaction is intact
