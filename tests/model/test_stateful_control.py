"""Model-based test of the store's newer transitions: leases renewed beside a locked row, pauses, parking.

A second Hypothesis state machine beside ``test_stateful.py`` (whose world of trees, signals and tenants
it leaves alone), in the same style: simulated workers claim through ``claims.claim`` and write through
the store with the fence token of their claim (a *ticket*); a client transaction is a second connection
that holds a run's row lock while the holder's heartbeat runs; time passes by SQL. Runs of two functions,
so that pausing one leaves the other claimable. The transitions:

- lease renewal and expiry: a heartbeat renews on the row, or, while a client transaction has the row
  locked, beside it in ``durable_lease_renewal`` (migration 0015); the row's lease runs out (the holder
  stalls) and the renewal beside it runs out too; a claim takes a run over only once both have;
- fencing: a stale ticket's writes (complete, fail, heartbeat, start) change nothing at all;
- pause and resume of a function (migration 0018): ``api.pause`` holds its due backlog, a claim holds
  any other it meets, ``api.unpause`` gives them back;
- parking: a run that fails for good with ``park`` waits for an operator, holding no worker, and
  ``api.resume`` unparks it with a fresh budget.

After every step, with the model's statuses, counters, holds and renewals: a fenced writer wrote nothing; a
paused run is never claimed (every claim takes exactly the runs the model says are claimable); a parked
run is never claimed until it is resumed; every claim counts one attempt, and every attempt that ended is
kept once (``durable_attempt`` has ``attempts`` rows per run, one fewer while it runs).

Profiles: as ``test_stateful.py`` (``DURABLE_MODEL_PROFILE``): the CI one is derandomized and small
(20 sequences of up to 25 steps); ``durable-model-long`` draws fresh, longer sequences.
"""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass

import psycopg
import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test

from durable_django import api
from durable_django.engine import lifecycle
from durable_django.store import claims, landing, leases
from tests.helpers import sql, subprocess_database_url

_COMMON = {"deadline": None, "database": None, "suppress_health_check": [HealthCheck.too_slow]}
settings.register_profile(
    "durable-control-ci",
    max_examples=20,
    stateful_step_count=25,
    derandomize=True,
    report_multiple_bugs=False,
    phases=[phase for phase in Phase if phase is not Phase.explain],
    **_COMMON,
)
settings.register_profile("durable-control-long", max_examples=600, stateful_step_count=60, **_COMMON)
PROFILE = {"durable-model-long": "durable-control-long"}.get(
    os.environ.get("DURABLE_MODEL_PROFILE", ""), "durable-control-ci"
)

FUNCTIONS = ("tests.noop", "tests.two_steps")
LEASE_SECONDS = 30.0
MAX_RUNS = 6
# More than there are runs: every claim takes all the model says it can, so what it took is exact.
CLAIM_ALL = 10
PENDING, RUNNING, WAITING, SUCCEEDED, FAILED = "pending", "running", "waiting", "succeeded", "failed"

# Per run, what the invariants compare with the model; and the renewals still ahead, and the attempts kept.
STATE = """
SELECT r.run_id, r.status, r.attempts, r.failures, r.recoveries, r.held_by, r.parked_at IS NOT NULL,
       r.attempt_started_at IS NOT NULL, r.worker_id,
       (SELECT count(*) FROM durable_attempt a WHERE a.run_id = r.run_id),
       EXISTS (SELECT FROM durable_lease_renewal k
               WHERE k.run_id = r.run_id AND k.token = r.attempts AND k.leased_until >= now())
FROM durable_run r
"""
SNAPSHOT = """
SELECT (SELECT json_agg(r ORDER BY r.run_id) FROM durable_run r),
       (SELECT json_agg(a ORDER BY a.run_id, a.number) FROM durable_attempt a),
       (SELECT json_agg(k ORDER BY k.run_id) FROM durable_lease_renewal k JOIN durable_run r USING (run_id)
        WHERE k.token = r.attempts AND r.status = 'running')
"""


def empty_tables():
    sql(
        "WITH a AS (DELETE FROM durable_attempt), k AS (DELETE FROM durable_lease_renewal), "
        "p AS (DELETE FROM durable_pause), s AS (DELETE FROM durable_step) DELETE FROM durable_run"
    )


@dataclass(eq=False)
class Run:
    run_id: str
    seq: int
    function: str
    status: str = PENDING
    attempts: int = 0
    failures: int = 0
    recoveries: int = 0
    started: bool = False
    worker: str | None = None
    row_expired: bool = False  # the row's lease has run out
    renewal: int | None = None  # the token of a renewal beside the row still ahead
    held_by_pause: bool = False
    parked: bool = False

    def __repr__(self):
        return f"<run #{self.seq} {self.function} {self.status}>"


@dataclass(frozen=True, eq=False)
class Ticket:
    run: Run
    token: int
    worker: str

    @property
    def holds(self) -> bool:
        return self.run.status == RUNNING and self.run.attempts == self.token


def holding(machine) -> bool:
    return any(ticket.holds for ticket in machine.tickets)


class ControlMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        empty_tables()
        self.runs: dict[str, Run] = {}
        self.paused: set[str] = set()
        self.seq = itertools.count(1)
        self.tickets: list[Ticket] = []
        self.bounds = lifecycle.claim_bounds(functions=list(FUNCTIONS), queues=None, tenant_id=None)

    def teardown(self):
        empty_tables()

    def claimable(self) -> list[Run]:
        """What a claim takes or holds: due pending runs no pause holds, and runs whose leases all ran out."""
        return [
            run
            for run in sorted(self.runs.values(), key=lambda run: run.seq)
            if (run.status == PENDING and not run.held_by_pause)
            or (run.status == RUNNING and run.row_expired and run.renewal != run.attempts)
        ]

    def draw(self, data, *, holds: bool) -> Ticket:
        return data.draw(st.sampled_from([ticket for ticket in self.tickets if ticket.holds == holds]))

    def fenced(self, call):
        """A write of a stale ticket: whatever it returns, it changes nothing stored."""
        before = sql(SNAPSHOT)
        result = call()
        assert sql(SNAPSHOT) == before, "a fenced writer wrote something"
        return result

    # -- clients and operators ------------------------------------------------------------------

    @precondition(lambda self: len(self.runs) < MAX_RUNS)
    @rule(function=st.sampled_from(FUNCTIONS))
    def enqueue(self, function):
        run = api.enqueue(function, {"n": len(self.runs)})
        self.runs[run.run_id] = Run(run.run_id, next(self.seq), function)

    @rule(function=st.sampled_from(FUNCTIONS))
    def pause(self, function):
        api.pause(function=function, reason="model")
        self.paused.add(function)
        for run in self.runs.values():
            if run.function == function and run.status == PENDING:
                run.held_by_pause = True

    @rule(function=st.sampled_from(FUNCTIONS))
    def unpause(self, function):
        assert api.unpause(function=function) == (function in self.paused)
        self.paused.discard(function)
        for run in self.runs.values():
            if run.function == function:
                run.held_by_pause = False

    @precondition(lambda self: any(run.parked or run.status == FAILED for run in self.runs.values()))
    @rule(data=st.data())
    def resume(self, data):
        """An operator resumes a parked (or failed) run: pending again, with a fresh budget."""
        run = data.draw(st.sampled_from([run for run in self.runs.values() if run.parked or run.status == FAILED]))
        api.resume(run.run_id)
        run.status, run.parked, run.failures, run.recoveries, run.worker = PENDING, False, 0, 0, None

    # -- workers --------------------------------------------------------------------------------

    @precondition(lambda self: self.claimable())
    @rule(worker=st.sampled_from(["w1", "w2"]), start_now=st.integers(0, 3))
    def claim(self, worker, start_now):
        candidates = self.claimable()
        # A paused function's pending run is held out by the claim that meets it; a run whose lease ran out
        # was running when the pause came, and is taken over (running attempts finish).
        takes = [run for run in candidates if run.status == RUNNING or run.function not in self.paused]
        claimed = claims.claim(
            limit=CLAIM_ALL, start_now=start_now, lease_seconds=LEASE_SECONDS, worker_id=worker, bounds=self.bounds
        )
        assert sorted(item.run.run_id for item in claimed) == sorted(run.run_id for run in takes)
        starting = {run.run_id for run in takes[:start_now]}
        for item in claimed:
            run = self.runs[item.run.run_id]
            recovered = run.status == RUNNING and run.started
            assert (item.started, item.recovered) == (run.run_id in starting, recovered)
            run.status, run.worker, run.attempts = RUNNING, worker, run.attempts + 1
            run.recoveries += recovered
            run.started, run.row_expired = run.run_id in starting, False
            self.tickets.append(Ticket(run, run.attempts, worker))
        for run in candidates:
            if run not in takes:
                run.held_by_pause = True

    @precondition(holding)
    @rule(data=st.data())
    def start(self, data):
        ticket = self.draw(data, holds=True)
        if ticket.run.started:
            return
        assert claims.start(ticket.run.run_id, ticket.token) is False
        ticket.run.started = True

    @precondition(holding)
    @rule(data=st.data())
    def heartbeat(self, data):
        """The holder renews its lease on the row; a renewal beside it is no longer needed."""
        ticket = self.draw(data, holds=True)
        renewal = leases.heartbeat([(ticket.run.run_id, ticket.token)], LEASE_SECONDS)
        assert renewal[(ticket.run.run_id, ticket.token)].renewed
        ticket.run.row_expired, ticket.run.renewal = False, None

    @precondition(holding)
    @rule(data=st.data())
    def heartbeat_beside_a_client_transaction(self, data):
        """A client transaction has the row locked (an emit_signal inside a long request): the heartbeat
        renews beside the row, and the row's own lease may run out before the client commits (then another
        worker claims at once)."""
        ticket = self.draw(data, holds=True)
        outlasts = data.draw(st.booleans(), label="the client outlasts the lease")
        with psycopg.connect(subprocess_database_url()) as client:
            client.execute("SELECT 1 FROM durable_run WHERE run_id = %s FOR UPDATE", [ticket.run.run_id])
            renewal = leases.heartbeat([(ticket.run.run_id, ticket.token)], LEASE_SECONDS)
            client.rollback()
        assert renewal[(ticket.run.run_id, ticket.token)] == leases.Renewal(True, False, True)
        ticket.run.renewal = ticket.token
        if outlasts:
            # Past the row's lease the run is still its holder's: another worker's claim leaves it alone.
            self.expire_row_lease(ticket.run)
            self.claim("w2" if ticket.worker == "w1" else "w1", 0)

    @precondition(holding)
    @rule(data=st.data())
    def row_lease_runs_out(self, data):
        """The holder stalls: its lease on the row runs out (a renewal beside it may still be ahead)."""
        ticket = self.draw(data, holds=True)
        self.expire_row_lease(ticket.run)

    def expire_row_lease(self, run: Run):
        sql("UPDATE durable_run SET leased_until = now() - interval '1 second' WHERE run_id = %s", [run.run_id])
        run.row_expired = True

    @precondition(lambda self: any(run.renewal is not None for run in self.runs.values()))
    @rule()
    def renewals_run_out(self):
        sql("UPDATE durable_lease_renewal SET leased_until = now() - interval '1 second'")
        for run in self.runs.values():
            run.renewal = None

    @precondition(holding)
    @rule(data=st.data())
    def complete(self, data):
        ticket = self.draw(data, holds=True)
        assert landing.complete_many([landing.Finished(ticket.run.run_id, ticket.token, "1", None)]) == {
            ticket.run.run_id
        }
        ticket.run.status, ticket.run.worker = SUCCEEDED, None

    @precondition(holding)
    @rule(data=st.data(), final=st.booleans(), park=st.booleans())
    def fail(self, data, final, park):
        """The attempt fails: retried at once, failed for good, or (out of budget, for a policy that parks)
        parked for an operator."""
        ticket = self.draw(data, holds=True)
        status = landing.fail(
            ticket.run.run_id,
            ticket.token,
            None,
            error="boom",
            error_type="builtins.ValueError",
            final=final,
            delay=0.0,
            park=park,
        )
        run = ticket.run
        expected = (WAITING if park else FAILED) if final else PENDING
        assert status == expected
        run.status, run.worker, run.failures = expected, None, run.failures + 1
        run.parked = final and park

    @precondition(lambda self: any(not ticket.holds for ticket in self.tickets))
    @rule(data=st.data(), write=st.sampled_from(["complete", "fail", "heartbeat", "start"]))
    def stale_write(self, data, write):
        """A writer whose claim was taken over (or whose attempt ended) writes: nothing changes."""
        ticket = self.draw(data, holds=False)
        run_id, token = ticket.run.run_id, ticket.token
        calls = {
            "complete": lambda: landing.complete_many([landing.Finished(run_id, token, "2", None)]),
            "fail": lambda: landing.fail(
                run_id, token, None, error="late", error_type="builtins.ValueError", final=True, delay=0.0
            ),
            "heartbeat": lambda: leases.heartbeat([(run_id, token)], LEASE_SECONDS)[(run_id, token)].held,
            "start": lambda: claims.start(run_id, token),
        }
        result = self.fenced(calls[write])
        assert result in (set(), None, False) or (write == "complete" and ticket.run.status == SUCCEEDED)

    # -- invariants -------------------------------------------------------------------------------

    @invariant()
    def database_matches_model(self):
        rows = {row[0]: row[1:] for row in sql(STATE)}
        assert set(rows) == set(self.runs)
        for run_id, run in self.runs.items():
            status, attempts, failures, recoveries, held_by, parked, started, worker, kept, renewal = rows[run_id]
            expected_hold = f"paused:function:{run.function}" if run.held_by_pause else None
            assert (status, attempts, failures, recoveries) == (run.status, run.attempts, run.failures, run.recoveries)
            assert (held_by, parked) == (expected_hold, run.parked), run
            assert kept == run.attempts - (run.status == RUNNING), "an attempt kept twice, or not at all"
            if run.status == RUNNING:
                assert (started, worker) == (run.started, run.worker)
                assert renewal == (run.renewal == run.attempts), "a renewal beside the row, or none, unlike the model"


@pytest.mark.long
@pytest.mark.django_db(transaction=True)
def test_leases_pauses_and_parking_behave_like_the_model():
    run_state_machine_as_test(ControlMachine, settings=settings.get_profile(PROFILE))
