"""The squashed migration: a new install applies it alone, an install part-way through the replaced chain
goes on with the chain, and both end with the same schema as the chain itself makes.

Each test migrates databases of its own on the test server (tests/migrations/scratch.py).
"""

import importlib
import os
import shutil
import subprocess
import sys
import uuid

from django.db.migrations.executor import MigrationExecutor
from django.db.migrations.loader import MigrationLoader
from django.test import override_settings

from tests.helpers import ROOT
from tests.migrations.scratch import APP, applied, catalog, differences, migrate

SQUASH = "0001_squashed_0022_drop_divergence_like_index"
REPLACED = [
    "0001_initial",
    "0002_drop_pattern_indexes",
    "0003_attempt_started_at",
    "0004_reconciler_indexes",
    "0005_flow_control",
    "0006_flow_admission",
    "0007_observability",
    "0008_fanout_deadlines",
    "0009_storage_tuning",
    "0010_claim_by_queue_and_tenant",
    "0011_rate_start_batches",
    "0012_rate_hold_queue",
    "0013_events_streams",
    "0014_admin_filter_indexes",
    "0015_lease_renewals",
    "0016_hold_woken_runs",
    "0017_attempts_kept",
    "0018_pauses",
    "0019_forks",
    "0020_input_search",
    "0021_schedule_policies",
    "0022_drop_divergence_like_index",
]


def squashed(name: str) -> bool:
    """Whether a migration of the app is the squash or one it replaces (later ones are numbered 0023 on)."""
    return name[:4] <= "0022"


def plan_names(connection, *, later: bool = False) -> list[str]:
    """The app's migrations ``migrate`` would apply next on ``connection``, in order: up to 0022 or the squash,
    and with ``later`` those after them too."""
    executor = MigrationExecutor(connection)
    (leaf,) = executor.loader.graph.leaf_nodes(APP)
    names = [migration.name for migration, _ in executor.migration_plan([leaf])]
    return names if later else [name for name in names if squashed(name)]


def applied_of_the_squash(connection) -> set[str]:
    return {name for name in applied(connection) if squashed(name)}


def test_the_squash_replaces_every_migration_of_the_chain():
    loader = MigrationLoader(None, replace_migrations=False)
    chain = sorted(name for app, name in loader.disk_migrations if app == APP and squashed(name) and name != SQUASH)
    assert chain == REPLACED
    assert loader.disk_migrations[(APP, SQUASH)].replaces == [(APP, name) for name in REPLACED]


def test_the_squash_alone_makes_the_schema_the_replaced_migrations_make(fresh_database):
    by_chain, by_squash = fresh_database(), fresh_database()
    migrate(by_chain, squash=False)
    assert plan_names(by_squash) == [SQUASH]
    migrate(by_squash)

    assert applied_of_the_squash(by_squash) == {SQUASH, *REPLACED}
    chain_schema, squash_schema = catalog(by_chain), catalog(by_squash)
    assert differences(chain_schema, squash_schema) == {}
    # Both hold the whole schema, not two empty dumps: every function, the trigger, no LIKE index.
    assert [name for name, arguments, definition in squash_schema["functions"]] == [
        "durable_admit",
        "durable_attempt_ended",
        "durable_hold_paused",
        "durable_release_held",
    ]
    assert [name for table, name, definition in squash_schema["triggers"]] == ["durable_attempt_ended"]
    assert not [name for table, name, definition in squash_schema["indexes"] if "pattern_ops" in definition]
    assert len(squash_schema["columns"]) > 100


def insert_rows_of_an_install_at_0012(connection) -> None:
    """Runs in several states with their journal, a schedule and a rate window, as 0012's schema holds them."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO durable_run (run_id, name, status, retry_policy, input, output, attempts, worker_id,
                                     leased_until, claimed_at, attempt_started_at, rate_key)
            VALUES ('r-pending', 'shop.charge', 'pending', '{}', '{"order": 1}', NULL, 0, NULL, NULL, NULL, NULL,
                    'rate:function:shop.charge'),
                   ('r-running', 'shop.charge', 'running', '{}', '{"order": 2}', NULL, 1, 'w-1',
                    now() + interval '30 seconds', now(), now(), NULL),
                   ('r-done', 'shop.ship', 'succeeded', '{}', '{"order": 3}', '{"shipped": true}', 1, NULL, NULL,
                    now(), now(), NULL)
            """
        )
        cursor.execute("INSERT INTO durable_step (run_id, step_id, result) VALUES ('r-done', 'ship', '\"ok\"')")
        cursor.execute(
            "INSERT INTO durable_signal (run_id, signal, occurrence, value) VALUES ('r-pending', 'paid', 0, 'true')"
        )
        cursor.execute(
            "INSERT INTO durable_schedule (schedule_id, name, cron, next_fire_at) "
            "VALUES ('nightly', 'shop.report', '0 2 * * *', now() + interval '1 day')"
        )
        cursor.execute(
            "INSERT INTO durable_rate_start (key, expires_at, starts, total) "
            "VALUES ('rate:function:shop.charge', now() + interval '1 second', 3, 3)"
        )


def rows_kept(connection) -> dict[str, list[tuple]]:
    queries = {
        "runs": "SELECT run_id, name, status, input, output, attempts FROM durable_run ORDER BY run_id",
        "steps": "SELECT run_id, step_id, result FROM durable_step",
        "signals": "SELECT run_id, signal, occurrence, value FROM durable_signal",
        "schedules": "SELECT schedule_id, name, cron FROM durable_schedule",
        "rate starts": "SELECT key, starts, total FROM durable_rate_start",
    }
    with connection.cursor() as cursor:
        kept = {}
        for name, query in queries.items():
            cursor.execute(query)
            kept[name] = cursor.fetchall()
        return kept


def test_an_install_part_way_through_the_chain_upgrades_with_the_chain_and_keeps_its_rows(fresh_database):
    installed, new = fresh_database(), fresh_database()
    migrate(installed, "0012_rate_hold_queue", squash=False)
    insert_rows_of_an_install_at_0012(installed)
    before = rows_kept(installed)
    assert len(before["runs"]) == 3

    assert plan_names(installed) == REPLACED[12:]  # the rest of the chain, not the squash
    migrate(installed)

    assert rows_kept(installed) == before
    assert applied_of_the_squash(installed) == {SQUASH, *REPLACED}
    assert plan_names(installed) == []
    migrate(new)
    assert differences(catalog(installed), catalog(new)) == {}
    with installed.cursor() as cursor:
        # Columns added since 0012 read their defaults on the old rows.
        cursor.execute("SELECT overlap, pause_on_failure FROM durable_schedule")
        assert cursor.fetchall() == [("allow_all", False)]
        # The attempt trigger (0017) keeps the end of an attempt that was running before the upgrade.
        cursor.execute("UPDATE durable_run SET status = 'succeeded', output = '1' WHERE run_id = 'r-running'")
        cursor.execute("SELECT run_id, number, worker_id, outcome FROM durable_attempt")
        assert cursor.fetchall() == [("r-running", 1, "w-1", "succeeded")]


LATER_MIGRATION = """
from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("durable_django", "0022_drop_divergence_like_index")]

    operations = [
        migrations.RunSQL("CREATE TABLE durable_later (id int)", reverse_sql="DROP TABLE durable_later"),
    ]
"""


def test_a_later_migration_on_0022_follows_the_squash_on_a_new_install_and_the_chain_on_an_old_one(
    fresh_database, tmp_path, monkeypatch
):
    """As a migration added after the squash names its dependency: 0022, which Django maps onto the squash."""
    package = f"later_migrations_{uuid.uuid4().hex[:8]}"
    shutil.copytree(
        os.path.join(ROOT, "durable_django", "migrations"),
        tmp_path / package,
        ignore=lambda directory, names: [name for name in names if name[:1].isdigit() and not squashed(name)],
    )
    (tmp_path / package / "0023_later.py").write_text(LATER_MIGRATION)
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    with override_settings(MIGRATION_MODULES={APP: package}):
        loader = MigrationLoader(None)
        assert loader.graph.leaf_nodes(APP) == [(APP, "0023_later")]
        assert loader.detect_conflicts() == {}
        assert loader.graph.node_map[(APP, "0023_later")].parents == {loader.graph.node_map[(APP, SQUASH)]}

        new, installed = fresh_database(), fresh_database()
        assert plan_names(new, later=True) == [SQUASH, "0023_later"]
        migrate(new)
        migrate(installed, "0012_rate_hold_queue", squash=False)
        assert plan_names(installed, later=True) == [*REPLACED[12:], "0023_later"]
        migrate(installed)
        for database in (new, installed):
            assert applied(database) == {SQUASH, *REPLACED, "0023_later"}
            assert ("durable_later", "r", "") in catalog(database)["relations"]
    for module in [name for name in sys.modules if name.split(".")[0] == package]:
        del sys.modules[module]


def test_makemigrations_finds_the_squash_in_step_with_the_models():
    """``makemigrations --check`` builds the app's state from the squash (no migration applied) and compares it
    with the models."""
    result = subprocess.run(
        [sys.executable, "-m", "django", "makemigrations", APP, "--check", "--dry-run", "--settings", "tests.settings"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": ROOT},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "No changes detected" in result.stdout


def test_reversing_the_chain_reinstalls_each_function_version_before(fresh_database):
    """Each migration that replaced a function reverses to the version before (store/schema)."""
    forward, reversed_ = fresh_database(), fresh_database()
    targets = ["0010_claim_by_queue_and_tenant", "0011_rate_start_batches", "0015_lease_renewals"]
    schemas = {}
    for target in targets:
        migrate(forward, target, squash=False)
        schemas[target] = catalog(forward)
    migrate(reversed_, squash=False)
    for target in reversed(targets):
        migrate(reversed_, target, squash=False)
        assert differences(catalog(reversed_), schemas[target]) == {}, target


def test_the_squash_reverses_to_an_empty_database(fresh_database):
    database = fresh_database()
    migrate(database)
    MigrationExecutor(database).migrate([(APP, None)])
    assert [name for name, kind, options in catalog(database)["relations"] if name.startswith("durable_")] == []
    assert catalog(database)["functions"] == []
