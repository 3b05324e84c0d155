"""The contract that keeps the client API's writes in the engine tells a writing store module from a reading one."""

from pathlib import Path

import pytest

import durable_django.store
from tests.store_writes import first_write, schema_functions, write_pattern

STORE = Path(durable_django.store.__file__).parent
PATTERN = write_pattern(schema_functions(STORE))


def source(module: str) -> str:
    return (STORE / f"{module}.py").read_text()


@pytest.mark.parametrize(
    "module", ["cancellation", "inserts", "pauses", "resumes", "streams", "schedules", "flow", "bulk", "forks"]
)
def test_a_store_module_that_writes_is_seen_to_write(module):
    assert first_write(source(module), PATTERN) is not None


@pytest.mark.parametrize(
    "module", ["runs", "stream_reads", "limit_states", "attempts", "overview", "task_results", "sessions", "db"]
)
def test_the_store_modules_the_api_reads_write_nothing(module):
    assert first_write(source(module), PATTERN) is None


@pytest.mark.parametrize(
    "statement",
    [
        "INSERT INTO durable_pause (key) VALUES (%s)",
        "UPDATE durable_run r SET held_by = NULL",
        "ON CONFLICT (key) DO UPDATE SET reason = EXCLUDED.reason",
        "DELETE FROM durable_schedule WHERE schedule_id = %s",
        "SELECT 1 FROM durable_run WHERE run_id = %s FOR NO KEY UPDATE",
        "SELECT 1 FROM durable_run FOR SHARE",
        "SELECT pg_notify('durable_wake', 'default')",
        "SELECT durable_release_held(%(reasons)s::text[], %(counts)s::int[], %(channel)s::text)",
    ],
)
def test_every_kind_of_write_is_seen(statement):
    assert first_write(f'SQL = """\n{statement}\n"""', PATTERN) == statement


def test_the_schemas_functions_are_read_from_its_files():
    assert {"durable_admit", "durable_release_held", "durable_hold_paused"} <= schema_functions(STORE)
