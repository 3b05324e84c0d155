"""The workload fuzzer's head-of-line oracle (tests/fuzz/idle.py), fed samples as the tables would give them.

Seed 724452107 (40 s) was reported with dozens of due runs "waiting beside idle slots" while the workers
that replaced five killed ones drained the backlog their absence left, claiming every few hundred
milliseconds: each sample caught some slot free between two attempts. A free slot is idle only if the
worker claims nothing while it stays free.
"""

from tests.fuzz.idle import DueRun, IdleOracle, WorkerSample

PATIENCE = 2.0


def backlog(count: int) -> list[DueRun]:
    return [DueRun(f"run-{n}", "fuzz.flow", due_since=0.0) for n in range(count)]


def test_a_worker_draining_a_backlog_is_not_idle_though_every_sample_finds_a_slot_free():
    oracle = IdleOracle(PATIENCE)
    reported = []
    for tick in range(40):  # 20 s of samples, half a second apart, each finding one of 3 slots free
        now = 10.0 + tick * 0.5
        reported += oracle.sample(now, [WorkerSample(100, 3, held=2, claims=5 + tick)], backlog(30))
    assert reported == []


def test_a_worker_that_keeps_a_slot_free_and_claims_nothing_is_reported_once_per_run_past_the_patience():
    oracle = IdleOracle(PATIENCE)
    worker = WorkerSample(100, 3, held=1, claims=7)
    runs = backlog(2)
    assert oracle.sample(10.0, [worker], runs) == []
    assert oracle.sample(11.0, [worker], runs) == []
    waited = oracle.sample(12.0, [worker], runs)
    assert [(item.run_id, item.worker_pid, item.free_slots, item.waited) for item in waited] == [
        ("run-0", 100, 2, 2.0),
        ("run-1", 100, 2, 2.0),
    ]
    assert oracle.sample(13.0, [worker], runs) == []  # each run once


def test_the_wait_counts_from_when_the_run_was_due_and_its_row_free_of_a_client_lock():
    oracle = IdleOracle(PATIENCE)
    worker = WorkerSample(100, 2, held=0, claims=3)
    late = DueRun("late", "fuzz.quick", due_since=11.5)
    locked = DueRun("locked", "fuzz.flow", due_since=0.0, free_since=12.0)
    for now in (10.0, 11.0, 12.0, 13.0):
        assert oracle.sample(now, [worker], [late, locked]) == []
    assert [item.run_id for item in oracle.sample(13.5, [worker], [late, locked])] == ["late"]
    assert [item.run_id for item in oracle.sample(14.0, [worker], [late, locked])] == ["locked"]


def test_a_full_worker_a_claim_a_worker_gone_or_a_fault_starts_the_spell_again():
    oracle = IdleOracle(PATIENCE)
    runs = backlog(1)
    oracle.sample(10.0, [WorkerSample(100, 2, held=1, claims=3)], runs)
    oracle.sample(11.0, [WorkerSample(100, 2, held=2, claims=3)], runs)  # full: not idle
    assert oracle.sample(12.5, [WorkerSample(100, 2, held=1, claims=3)], runs) == []
    assert oracle.sample(14.0, [WorkerSample(100, 2, held=1, claims=4)], runs) == []  # it claimed
    oracle.forget()  # a fault
    assert oracle.sample(15.5, [WorkerSample(100, 2, held=1, claims=4)], runs) == []
    assert oracle.sample(16.0, [], runs) == []  # no longer quiet
    assert oracle.sample(17.0, [WorkerSample(100, 2, held=1, claims=4)], runs) == []
    assert [item.run_id for item in oracle.sample(19.0, [WorkerSample(100, 2, held=1, claims=4)], runs)] == ["run-0"]
