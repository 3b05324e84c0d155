"""Schedules on the real database: upsert, tenancy, firing races, misfires, DST, settings sync, purge."""

import json
import logging
import threading
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from django.core import checks
from django.db import connections, transaction

from durable_django import schedule, unschedule
from durable_django.api.schedules import fire_schedule_now, get_schedule, list_schedules, set_schedule_enabled
from durable_django.engine.cron import next_fire_after, parse
from durable_django.engine.schedules import fire_due, fire_tick, sync_settings_schedules, tick_key
from durable_django.exceptions import InvalidInput, InvalidSchedule, UnknownFunction
from durable_django.registry import registry
from durable_django.store import schedules as schedule_store
from durable_django.store.sessions import listening
from durable_django.worker.loop import WorkerOptions
from durable_django.worker.scheduler import FIRE_BATCH, SchedulerThread
from tests.helpers import run_in_threads, sql, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

NAMES = registry.names()


def runs(name=None):
    """(idempotency_key, tenant_id, input) of every run, oldest first."""
    rows = sql(
        "SELECT idempotency_key, tenant_id::text, input::text FROM durable_run "
        "WHERE %s::text IS NULL OR name = %s ORDER BY created_at",
        [name, name],
    )
    return [(key, tenant, json.loads(input_)) for key, tenant, input_ in rows]


def db_now():
    return sql("SELECT now()")[0][0]


def set_next_fire(stored_id, at):
    sql("UPDATE durable_schedule SET next_fire_at = %s WHERE schedule_id = %s", [at, stored_id])


def nested(depth):
    """A JSON value nested deeper than the encoder can go (a RecursionError, not a DurableError)."""
    value = []
    for _ in range(depth):
        value = [value]
    return value


def stored(stored_id):
    rows = sql(
        "SELECT next_fire_at, enabled, source, last_fired_at FROM durable_schedule WHERE schedule_id = %s", [stored_id]
    )
    return rows[0] if rows else None


@pytest.fixture
def scheduler_threads():
    started = []

    def start(**options):
        halt = threading.Event()
        thread = SchedulerThread(WorkerOptions(**options), halt)
        thread.start()
        started.append((thread, halt))
        return thread

    yield start
    for thread, halt in started:
        halt.set()
        thread.join(timeout=30)
        assert not thread.is_alive()


# -- the API -------------------------------------------------------------------------------------


def test_schedule_creates_with_the_first_tick_after_now():
    before = db_now()
    created = schedule("daily", "tests.noop", "0 3 * * *", input={"a": 1}, tz="Europe/Berlin")
    assert created.schedule_id == "daily" and created.name == "tests.noop" and created.tz == "Europe/Berlin"
    assert created.input == {"a": 1} and created.enabled and created.tenant_id is None
    assert created.next_fire_at == next_fire_after(parse("0 3 * * *", "Europe/Berlin"), before)
    assert sql("SELECT schedule_id, source FROM durable_schedule") == [(":daily", "api")]


def test_upsert_keeps_next_fire_at_unless_cron_or_zone_change():
    schedule("s", "tests.noop", "*/5 * * * *")
    owed = datetime(2020, 1, 1, tzinfo=UTC)  # a tick owed since downtime
    set_next_fire(":s", owed)
    same = schedule("s", "tests.two_steps", "*/5  * * * *", input={"new": True})
    assert same.next_fire_at == owed and same.name == "tests.two_steps" and same.input == {"new": True}
    changed_cron = schedule("s", "tests.noop", "*/10 * * * *")
    assert changed_cron.next_fire_at > db_now() - timedelta(seconds=1)
    set_next_fire(":s", owed)
    changed_zone = schedule("s", "tests.noop", "*/10 * * * *", tz="Asia/Tokyo")
    assert changed_zone.next_fire_at > owed and changed_zone.tz == "Asia/Tokyo"


@pytest.mark.parametrize(
    "kwargs, error",
    [
        ({"cron": "not a cron"}, InvalidSchedule),
        ({"cron": "61 * * * *"}, InvalidSchedule),
        ({"cron": "0 0 30 2 *"}, InvalidSchedule),
        ({"tz": "Nowhere/Special"}, InvalidSchedule),
        ({"tz": "Europe"}, InvalidSchedule),  # a folder of the zoneinfo tree
        ({"tz": "x" * 10_000}, InvalidSchedule),
        ({"name": "tests.not_registered"}, UnknownFunction),
        ({"tenant_id": "not-a-uuid"}, InvalidInput),
        ({"input": {"bad": object()}}, InvalidInput),
        ({"schedule_id": ""}, InvalidInput),
        ({"schedule_id": None}, InvalidInput),
        ({"schedule_id": "nightly\x00"}, InvalidInput),
        ({"enabled": "yes"}, InvalidInput),
    ],
)
def test_bad_input_raises_a_typed_error_and_writes_nothing(kwargs, error):
    schedule("existing", "tests.noop", "0 3 * * *")
    before = sql("SELECT schedule_id, cron, tz, name, updated_at FROM durable_schedule")
    arguments = {"schedule_id": "existing", "name": "tests.noop", "cron": "0 4 * * *", **kwargs}
    with pytest.raises(error):
        schedule(arguments.pop("schedule_id"), arguments.pop("name"), arguments.pop("cron"), **arguments)
    assert sql("SELECT schedule_id, cron, tz, name, updated_at FROM durable_schedule") == before


def test_two_tenants_register_one_id_as_two_schedules():
    tenant_a, tenant_b = uuid.uuid4(), uuid.uuid4()
    a = schedule("nightly", "tests.noop", "0 1 * * *", input="a", tenant_id=tenant_a)
    b = schedule("nightly", "tests.noop", "0 2 * * *", input="b", tenant_id=tenant_b)
    untagged = schedule("nightly", "tests.noop", "0 3 * * *", input="u")
    assert sorted(r[0] for r in sql("SELECT schedule_id FROM durable_schedule")) == sorted(
        [f"{tenant_a}:nightly", f"{tenant_b}:nightly", ":nightly"]
    )
    assert (a.schedule_id, a.tenant_id, b.tenant_id) == ("nightly", str(tenant_a), str(tenant_b))
    assert get_schedule("nightly", tenant_id=tenant_a).input == "a"
    assert get_schedule("nightly", tenant_id=tenant_b).cron == "0 2 * * *"
    assert get_schedule("nightly").input == "u" == untagged.input
    assert [s.input for s in list_schedules(tenant_id=tenant_b)] == ["b"]
    assert len(list_schedules()) == 3  # the operator's view
    # Each tenant's tick fires its own run, in its own tenant, under its own key.
    for stored_id in (f"{tenant_a}:nightly", f"{tenant_b}:nightly", ":nightly"):
        set_next_fire(stored_id, datetime(2024, 1, 1, 1, tzinfo=UTC))
    fired = fire_due(names=NAMES, tenant_id=None)
    assert len(fired) == 3 and all(f.error is None for f in fired)
    key = tick_key("nightly", datetime(2024, 1, 1, 1, tzinfo=UTC))
    assert sorted(runs(), key=lambda r: r[2]) == [
        (f"{tenant_a}:{key}", str(tenant_a), "a"),
        (f"{tenant_b}:{key}", str(tenant_b), "b"),
        (f":{key}", None, "u"),
    ]
    # Unscheduling in one tenant leaves the others.
    assert unschedule("nightly", tenant_id=tenant_a) is True
    assert unschedule("nightly", tenant_id=tenant_a) is False
    assert get_schedule("nightly", tenant_id=tenant_b) is not None and get_schedule("nightly") is not None


def test_a_tenant_bound_scheduler_fires_only_its_tenant():
    tenant_a, tenant_b = str(uuid.uuid4()), str(uuid.uuid4())
    for tenant in (tenant_a, tenant_b):
        schedule("t", "tests.noop", "* * * * *", tenant_id=tenant)
        set_next_fire(f"{tenant}:t", datetime(2024, 1, 1, tzinfo=UTC))
    assert [f.schedule.tenant_id for f in fire_due(names=NAMES, tenant_id=tenant_a)] == [tenant_a]
    assert [r[1] for r in runs()] == [tenant_a]


def test_schedule_takes_part_in_the_callers_transaction():
    with pytest.raises(RuntimeError), transaction.atomic():
        schedule("rolled-back", "tests.noop", "* * * * *")
        raise RuntimeError("roll back")
    assert sql("SELECT count(*) FROM durable_schedule")[0][0] == 0


# -- firing ------------------------------------------------------------------------------------------


def test_a_fired_tick_is_a_normal_run_with_snapshot_tenant_and_one_notify():
    tenant = str(uuid.uuid4())
    schedule("flaky", "tests.flaky", "0 * * * *", input={"succeed_on": 1}, tenant_id=tenant)
    tick = datetime(2024, 5, 1, 10, tzinfo=UTC)
    set_next_fire(f"{tenant}:flaky", tick)
    with listening(["durable_wake"]) as listener:
        [fired] = fire_due(names=NAMES, tenant_id=None)
        heard = list(listener.notifies(timeout=0.5))
    run = fired.run
    assert fired.error is None and run.name == "tests.flaky" and run.input == {"succeed_on": 1}
    assert run.tenant_id == tenant and run.idempotency_key == tick_key("flaky", tick)
    assert run.retry_policy == registry.newest("tests.flaky").retry
    assert [(n.channel, n.payload) for n in heard] == [("durable_wake", "default")]
    next_fire_at, _, _, last_fired_at = stored(f"{tenant}:flaky")
    assert next_fire_at > db_now() and last_fired_at is not None


def test_eight_threads_racing_on_one_due_schedule_fire_it_once():
    schedule("race", "tests.noop", "* * * * *")
    set_next_fire(":race", datetime(2024, 1, 1, tzinfo=UTC))
    results = run_in_threads(8, lambda i: fire_due(names=NAMES, tenant_id=None))
    assert sum(len(fired) for fired in results) == 1
    assert len(runs()) == 1


def test_four_threads_over_fifty_due_schedules_fire_each_once():
    owed = datetime(2024, 1, 1, tzinfo=UTC)
    for index in range(50):
        schedule(f"s{index}", "tests.noop", "* * * * *", input=index)
        set_next_fire(f":s{index}", owed)

    def drain(_):
        fired = []
        while batch := fire_due(names=NAMES, tenant_id=None, limit=7):
            fired.extend(batch)
        return fired

    results = run_in_threads(4, drain)
    assert sorted(f.schedule.input for fired in results for f in fired) == list(range(50))
    assert sorted(r[2] for r in runs()) == list(range(50))


def test_a_disabled_schedule_does_not_fire_and_re_enabling_owes_nothing():
    schedule("off", "tests.noop", "* * * * *", enabled=False)
    set_next_fire(":off", datetime(2024, 1, 1, tzinfo=UTC))
    assert fire_due(names=NAMES, tenant_id=None) == []
    assert schedule_store.seconds_until_next_due(names=NAMES, tenant_id=None) is None
    disabled = set_schedule_enabled("off", False)
    assert not disabled.enabled
    enabled = set_schedule_enabled("off", True)
    assert enabled.enabled and enabled.next_fire_at > db_now()
    assert fire_due(names=NAMES, tenant_id=None) == [] and runs() == []
    with pytest.raises(InvalidInput):
        set_schedule_enabled("missing", True)


def test_after_an_outage_of_ten_ticks_it_fires_once_then_resumes(scheduler_threads):
    schedule("outage", "tests.noop", "*/2 * * * * *")
    now = db_now()
    # Start well inside a tick's two seconds: at its very end the tick the catch-up moves to comes due before
    # the second look below, which would rightly fire it.
    tick = next_fire_after(parse("*/2 * * * * *"), now)
    if tick - now < timedelta(seconds=1):
        now = wait_until(lambda: (moment := db_now()) > tick and moment, message="the database's clock past a tick")
    first_missed = next_fire_after(parse("*/2 * * * * *"), now - timedelta(seconds=21))
    set_next_fire(":outage", first_missed)  # ten ticks passed with no scheduler running
    [fired] = fire_due(names=NAMES, tenant_id=None)
    assert fired.run.idempotency_key == tick_key("outage", first_missed)
    next_fire_at = stored(":outage")[0]
    assert now < next_fire_at <= db_now() + timedelta(seconds=2)
    assert fire_due(names=NAMES, tenant_id=None) == []
    assert len(runs()) == 1
    # A running scheduler picks up the following ticks.
    scheduler_threads(functions=["tests.noop"])
    wait_until(lambda: len(runs()) >= 3, timeout=60, message="two more ticks")
    keys = [key for key, _, _ in runs()]
    assert keys[0] == f":{tick_key('outage', first_missed)}"
    later = [datetime.fromisoformat(key.split(":", 3)[3]) for key in keys[1:]]
    assert all(tick >= next_fire_at for tick in later) and len(set(later)) == len(later)


def test_ticks_follow_the_cron_in_a_non_utc_zone_across_dst():
    # Replay the scheduler firing each tick on time through New York's 2024 spring-forward.
    schedule("dst", "tests.noop", "30 1,2,3 * * *", tz="America/New_York")
    set_next_fire(":dst", datetime(2024, 3, 9, 6, 30, tzinfo=UTC))  # 01:30 EST, Mar 9
    for _ in range(6):
        fired = schedule_store.claim_due(
            names=NAMES, tenant_id=None, limit=10, fire=lambda key, s, now: fire_tick(key, s, s.next_fire_at)
        )
        assert len(fired) == 1 and fired[0].error is None
    ticks = [datetime.fromisoformat(key.split(":", 3)[3]) for key, _, _ in runs()]
    zone = parse("* * * * *", "America/New_York").zone
    assert [tick.astimezone(zone).strftime("%d %H:%M %Z") for tick in ticks] == [
        "09 01:30 EST",
        "09 02:30 EST",
        "09 03:30 EST",
        # 02:30 does not exist on Mar 10: it is shifted to 03:30 EDT, which fires once.
        "10 01:30 EST",
        "10 03:30 EDT",
        "11 01:30 EDT",
    ]
    assert stored(":dst")[0] == datetime(2024, 3, 11, 6, 30, tzinfo=UTC)  # 02:30 EDT


def test_a_corrupt_schedule_or_a_missing_function_blocks_no_other():
    owed = datetime(2024, 1, 1, tzinfo=UTC)
    for index in range(3):
        schedule(f"corrupt{index}", "tests.noop", "* * * * *")
    schedule("healthy", "tests.noop", "* * * * *")
    sql("UPDATE durable_schedule SET cron = 'garbage' WHERE schedule_id IN (':corrupt0', ':corrupt1')")
    sql("UPDATE durable_schedule SET tz = 'Nowhere/Zone' WHERE schedule_id = ':corrupt2'")
    sql(
        "INSERT INTO durable_schedule (schedule_id, name, cron, tz, input, next_fire_at, enabled, source) "
        "VALUES (':orphan', 'tests.gone', '* * * * *', 'UTC', 'null', %s, true, 'api')",
        [owed],
    )
    for stored_id in (":corrupt0", ":corrupt1", ":corrupt2", ":healthy"):
        set_next_fire(stored_id, owed - timedelta(seconds=1))
    set_next_fire(":healthy", owed)  # last in the due order
    fired = fire_due(names=NAMES, tenant_id=None, limit=4)
    assert {f.schedule.schedule_id: (type(f.error).__name__, f.postponed) for f in fired} == {
        "corrupt0": ("InvalidSchedule", True),
        "corrupt1": ("InvalidSchedule", True),
        "corrupt2": ("InvalidSchedule", True),
        "healthy": ("NoneType", False),
    }
    assert [key for key, _, _ in runs()] == [f":{tick_key('healthy', owed)}"]
    now = db_now()
    for stored_id in (":corrupt0", ":corrupt1", ":corrupt2"):
        assert stored(stored_id)[0] > now + timedelta(minutes=59)  # out of the way for an hour
    assert stored(":orphan")[0] == owed  # still owed, for a worker that has tests.gone
    assert fire_due(names=NAMES, tenant_id=None) == []


class RefusedInput:
    """A real database error for one schedule's run: a CHECK constraint on durable_run refuses the input "refused"."""

    def install(self):
        sql("""ALTER TABLE durable_run ADD CONSTRAINT test_refused_input CHECK (input <> '"refused"') NOT VALID""")

    def remove(self):
        sql("ALTER TABLE durable_run DROP CONSTRAINT IF EXISTS test_refused_input")


@pytest.fixture
def refused_input():
    fault = RefusedInput()
    yield fault
    fault.remove()


def test_a_database_error_while_firing_leaves_the_tick_owed_for_the_next_pass(refused_input):
    owed = datetime(2024, 1, 1, tzinfo=UTC)
    for name in ("refused", "healthy"):
        schedule(name, "tests.noop", "* * * * *", input=name)
        set_next_fire(f":{name}", owed)
    refused_input.install()
    fired = fire_due(names=NAMES, tenant_id=None)
    assert stored(":refused")[0] == owed  # rolled back to its savepoint, still owed: not an hour ahead
    assert [r[2] for r in runs()] == ["healthy"]
    assert {f.schedule.schedule_id: (type(f.error).__name__, f.postponed) for f in fired} == {
        "refused": ("IntegrityError", False),
        "healthy": ("NoneType", False),
    }
    refused_input.remove()
    [again] = fire_due(names=NAMES, tenant_id=None)
    assert again.error is None and again.run.idempotency_key == tick_key("refused", owed)
    assert stored(":refused")[0] > db_now()


def test_the_scheduler_retries_a_tick_the_database_refused_and_fires_the_others(refused_input, scheduler_threads):
    owed = datetime(2024, 1, 1, tzinfo=UTC)
    schedule("refused", "tests.noop", "0 3 * * *", input="refused")
    set_next_fire(":refused", owed)
    schedule("every-second", "tests.noop", "* * * * * *", input="tick")
    refused_input.install()
    thread = scheduler_threads()
    wait_until(lambda: len(runs()) >= 2, timeout=30, message="the healthy schedule's ticks")
    assert thread.is_alive() and stored(":refused")[0] == owed and "refused" not in [r[2] for r in runs()]
    refused_input.remove()
    wait_until(lambda: "refused" in [r[2] for r in runs()], timeout=30, message="the owed tick, retried")
    assert f":{tick_key('refused', owed)}" in [key for key, _, _ in runs()]


def test_while_the_database_refuses_a_tick_each_pass_backs_off_further(refused_input):
    owed = datetime(2024, 1, 1, tzinfo=UTC)
    schedule("refused", "tests.noop", "0 3 * * *", input="refused")
    set_next_fire(":refused", owed)
    refused_input.install()
    scheduler = SchedulerThread(WorkerOptions(), threading.Event())  # its passes, run here, in this thread
    assert [scheduler.step() for _ in range(8)] == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0])
    assert stored(":refused")[0] == owed and runs() == []
    refused_input.remove()
    assert scheduler.step() >= 0.05 and [r[0] for r in runs()] == [f":{tick_key('refused', owed)}"]
    # Once a pass went through, the next refusal starts from the shortest wait again.
    set_next_fire(":refused", owed + timedelta(days=1))
    refused_input.install()
    assert scheduler.step() == pytest.approx(0.1)


def test_a_full_batch_of_refused_ticks_holds_back_no_schedule_behind_it(refused_input, scheduler_threads):
    owed = datetime(2024, 1, 1, tzinfo=UTC)
    for index in range(FIRE_BATCH):
        schedule(f"refused{index}", "tests.noop", "0 3 * * *", input="refused")
        set_next_fire(f":refused{index}", owed)
    schedule("behind", "tests.noop", "0 3 * * *", input="behind")
    set_next_fire(":behind", owed + timedelta(seconds=1))  # after every refused one in the due order
    refused_input.install()
    thread = scheduler_threads()
    wait_until(lambda: runs(), timeout=30, message="the schedule behind the refused batch")
    assert [r[2] for r in runs()] == ["behind"] and thread.is_alive()
    assert sql("SELECT DISTINCT next_fire_at FROM durable_schedule WHERE input = '\"refused\"'") == [(owed,)]


def test_an_operator_can_disable_and_enable_a_schedule_whose_stored_zone_is_a_folder():
    schedule("corrupt", "tests.noop", "* * * * *")
    owed = datetime(2024, 1, 1, tzinfo=UTC)
    sql("UPDATE durable_schedule SET tz = 'Europe', next_fire_at = %s WHERE schedule_id = ':corrupt'", [owed])
    assert not set_schedule_enabled("corrupt", False).enabled
    enabled = set_schedule_enabled("corrupt", True)
    assert enabled.enabled and enabled.next_fire_at == owed  # kept: firing will postpone it as a bad schedule


def test_fire_now_enqueues_once_per_call_and_leaves_the_ticks_alone():
    schedule("manual", "tests.noop", "0 3 * * *", input={"m": 1}, enabled=False)
    next_fire_at = stored(":manual")[0]
    first = fire_schedule_now("manual")
    second = fire_schedule_now("manual")
    assert first.run_id != second.run_id and first.input == {"m": 1}
    assert first.idempotency_key.startswith("schedule:manual:manual:")
    next_after, enabled, _, last_fired_at = stored(":manual")
    assert next_after == next_fire_at and not enabled and last_fired_at is not None
    with pytest.raises(InvalidInput):
        fire_schedule_now("manual", tenant_id=uuid.uuid4())


# -- settings and the scheduler thread ----------------------------------------------------------------


def test_settings_sync_creates_keeps_disables_and_removes():
    tenant = str(uuid.uuid4())
    declared = {
        "nightly": {"name": "tests.noop", "cron": "0 2 * * *", "tz": "Europe/Paris", "input": {"n": 1}},
        "tenanted": {"name": "tests.noop", "cron": "0 5 * * *", "tenant_id": tenant},
        "broken": {"name": "tests.noop", "cron": "every day"},
    }
    schedule("from-api", "tests.noop", "0 4 * * *")
    upserted, deleted, invalid = sync_settings_schedules(declared)
    assert sorted(s.schedule_id for s in upserted) == ["nightly", "tenanted"] and deleted == []
    assert list(invalid) == ["broken"] and isinstance(invalid["broken"], InvalidSchedule)
    assert stored(":nightly")[2] == "settings" and stored(f"{tenant}:tenanted")[1] is True
    # The operator disables it; a restart with a changed cron does not re-enable it.
    set_schedule_enabled("nightly", False)
    owed = datetime(2024, 1, 1, tzinfo=UTC)
    set_next_fire(f"{tenant}:tenanted", owed)
    declared["nightly"]["cron"] = "0 3 * * *"
    sync_settings_schedules(declared)
    assert stored(":nightly")[1] is False and get_schedule("nightly").cron == "0 3 * * *"
    assert stored(f"{tenant}:tenanted")[0] == owed  # unchanged entry: the owed fire is kept
    # Removing an entry deletes its schedule; API schedules are never touched.
    del declared["tenanted"]
    _, deleted, _ = sync_settings_schedules(declared)
    assert deleted == [f"{tenant}:tenanted"]
    assert sorted(r[0] for r in sql("SELECT schedule_id FROM durable_schedule")) == [":from-api", ":nightly"]
    # An entry can also declare a schedule disabled; it never enables one.
    declared["nightly"]["enabled"] = True
    declared["off"] = {"name": "tests.noop", "cron": "* * * * *", "enabled": False}
    sync_settings_schedules(declared)
    assert stored(":nightly")[1] is False and stored(":off")[1] is False


def test_the_scheduler_thread_syncs_settings_and_fires(settings, scheduler_threads):
    settings.DURABLE = {
        **settings.DURABLE,
        "SCHEDULES": {"every-second": {"name": "tests.noop", "cron": "* * * * * *", "input": "tick"}},
    }
    thread = scheduler_threads(functions=None)
    assert thread.synced.wait(30)
    assert stored(":every-second")[2] == "settings"
    wait_until(lambda: runs(), timeout=30, message="a fired tick")
    assert runs()[0][2] == "tick"


def test_a_worker_without_the_function_leaves_the_schedule_for_one_that_has_it(scheduler_threads):
    schedule("two", "tests.two_steps", "* * * * *")
    set_next_fire(":two", datetime(2024, 1, 1, tzinfo=UTC))
    schedule("noop", "tests.noop", "* * * * *")
    set_next_fire(":noop", datetime(2024, 1, 1, 0, 0, 1, tzinfo=UTC))
    thread = scheduler_threads(functions=["tests.noop"])
    assert thread.synced.wait(30)
    wait_until(lambda: runs(), timeout=30, message="the noop tick")
    assert [r[0].split(":")[2] for r in runs()] == ["noop"]
    assert stored(":two")[0] == datetime(2024, 1, 1, tzinfo=UTC)


def test_the_scheduler_runs_the_periodic_purge(settings, scheduler_threads, caplog):
    caplog.set_level(logging.INFO, logger="durable_django.scheduler")
    sql(
        "INSERT INTO durable_run (run_id, name, status, input, retry_policy, created_at, updated_at) "
        "SELECT 'old-' || i, 'tests.noop', 'succeeded', 'null', '{}', now() - interval '2 days', "
        "now() - interval '2 days' FROM generate_series(1, 30) i"
    )
    sql(
        "INSERT INTO durable_run (run_id, name, status, input, retry_policy, created_at, updated_at) "
        "VALUES ('fresh', 'tests.noop', 'succeeded', 'null', '{}', now(), now()), "
        "('live', 'tests.noop', 'pending', 'null', '{}', now() - interval '3 days', now() - interval '3 days')"
    )
    settings.DURABLE = {**settings.DURABLE, "PURGE_AFTER": timedelta(days=1)}
    scheduler_threads(functions=[])
    wait_until(lambda: sql("SELECT count(*) FROM durable_run")[0][0] == 2, timeout=30, message="the purge")
    assert sorted(r[0] for r in sql("SELECT run_id FROM durable_run")) == ["fresh", "live"]

    def said():
        return [record.getMessage() for record in caplog.records if record.getMessage().startswith("purged ")]

    wait_until(said, timeout=30, message="the purge's line")
    assert said() == ["purged 30 finished runs older than 86400s"]
    connections.close_all()


def test_malformed_settings_schedules_do_not_stop_the_scheduler(settings, scheduler_threads):
    settings.DURABLE = {**settings.DURABLE, "SCHEDULES": ["not", "a", "dict"]}
    schedule("api", "tests.noop", "* * * * *")
    set_next_fire(":api", datetime(2024, 1, 1, tzinfo=UTC))
    thread = scheduler_threads()
    assert thread.synced.wait(30)
    wait_until(lambda: runs(), timeout=30, message="the API schedule's tick")
    assert thread.is_alive()


BAD_ENTRIES = {
    "folder-zone": {"name": "tests.noop", "cron": "* * * * * *", "tz": "Europe"},
    "long-zone": {"name": "tests.noop", "cron": "* * * * * *", "tz": "x" * 10_000},
    "deep-input": {"name": "tests.noop", "cron": "* * * * * *", "input": nested(100_000)},
}


def test_check_reports_each_bad_settings_entry_as_e007_without_crashing(settings):
    settings.DURABLE = {
        **settings.DURABLE,
        "SCHEDULES": {**BAD_ENTRIES, "good": {"name": "tests.noop", "cron": "* * * * *"}},
    }
    errors = [error for error in checks.run_checks() if error.id == "durable_django.E007"]
    assert len(errors) == len(BAD_ENTRIES)
    for entry in BAD_ENTRIES:
        assert any(f"entry {entry!r} is invalid" in error.msg for error in errors), entry
    assert any("unknown time zone 'Europe'" in error.msg for error in errors)


def test_bad_settings_entries_and_a_corrupt_stored_zone_stop_no_other_schedule(settings, scheduler_threads, caplog):
    settings.DURABLE = {
        **settings.DURABLE,
        "SCHEDULES": {**BAD_ENTRIES, "every-second": {"name": "tests.noop", "cron": "* * * * * *", "input": "tick"}},
    }
    schedule("stored-folder-zone", "tests.noop", "* * * * *", input="corrupt")
    sql("UPDATE durable_schedule SET tz = 'America' WHERE schedule_id = ':stored-folder-zone'")
    set_next_fire(":stored-folder-zone", datetime(2024, 1, 1, tzinfo=UTC))
    thread = scheduler_threads()
    assert thread.synced.wait(30)
    wait_until(lambda: len(runs()) >= 2, timeout=30, message="two ticks of the valid entry")
    assert thread.is_alive()
    assert {run_input for _, _, run_input in runs()} == {"tick"}
    assert sorted(r[0] for r in sql("SELECT schedule_id FROM durable_schedule")) == [
        ":every-second",
        ":stored-folder-zone",
    ]
    assert stored(":stored-folder-zone")[0] > db_now() + timedelta(minutes=59)  # postponed, as a bad schedule
    errors = [record.getMessage() for record in caplog.records if record.levelno >= logging.ERROR]
    for entry in BAD_ENTRIES:
        assert any(f'DURABLE["SCHEDULES"][{entry!r}] is invalid' in message for message in errors), entry
    assert any("stored-folder-zone" in message and "InvalidSchedule" in message for message in errors)


def test_a_settings_sync_the_database_refuses_holds_up_no_firing_and_is_retried(settings, scheduler_threads):
    schedule("api", "tests.noop", "* * * * *", input="api")
    set_next_fire(":api", datetime(2024, 1, 1, tzinfo=UTC))
    settings.DURABLE = {**settings.DURABLE, "SCHEDULES": {"from-settings": {"name": "tests.noop", "cron": "0 3 * * *"}}}
    # A real database error on every sync: PostgreSQL refuses the settings row.
    sql(
        "CREATE FUNCTION test_refuse_row() RETURNS trigger LANGUAGE plpgsql AS "
        "$$ BEGIN RAISE EXCEPTION 'refused by a test trigger'; END $$"
    )
    sql(
        "CREATE TRIGGER test_refuse_settings BEFORE INSERT ON durable_schedule FOR EACH ROW "
        "WHEN (NEW.source = 'settings') EXECUTE FUNCTION test_refuse_row()"
    )
    try:
        thread = scheduler_threads()
        wait_until(lambda: runs(), timeout=30, message="the API schedule's tick while the sync fails")
        assert thread.is_alive() and stored(":from-settings") is None
    finally:
        sql("DROP TRIGGER test_refuse_settings ON durable_schedule")
        sql("DROP FUNCTION test_refuse_row()")
    wait_until(lambda: stored(":from-settings"), timeout=30, message="the sync, retried")
    assert stored(":from-settings")[2] == "settings" and thread.is_alive()
