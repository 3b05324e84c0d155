"""The fuzzer's head-of-line oracle: which due runs waited while some worker kept a slot idle.

A sample of the tables sees, for each worker, how many runs it holds and how many it has claimed in
all (attempts ended plus runs held: a claim adds one, for good). A slot that is free for an instant
between two attempts is no idle slot: a worker draining a backlog always has one now and then. A
worker is idle only while every sample finds it with a free slot and its claim count unchanged: it
claimed nothing since the first of them, so its free slot stayed free. A due run no limit applies to
waited beside it when both the run was due and the worker idle (and the run's row free of a client's
lock) for longer than the patience.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class WorkerSample:
    """One worker, as one sample of the tables found it."""

    pid: int
    concurrency: int
    held: int  # runs it holds now
    claims: int  # runs it ever claimed: its ended attempts plus the runs it holds

    @property
    def free(self) -> int:
        return max(self.concurrency - self.held, 0)


@dataclass(frozen=True)
class DueRun:
    run_id: str
    name: str
    due_since: float  # epoch seconds
    free_since: float = 0.0  # when a client's transaction last let go of its row (epoch seconds; 0: never held)


@dataclass(frozen=True)
class Waited:
    """A due run that waited while a worker stayed idle."""

    run_id: str
    name: str
    waited: float  # seconds it was due, the worker idle and its row free, together
    worker_pid: int
    free_slots: int


@dataclass
class _Spell:
    since: float
    claims: int


class IdleOracle:
    """Follows each worker's idle spells from sample to sample; reports each run that waited too long once."""

    def __init__(self, patience: float) -> None:
        self.patience = patience
        self._spells: dict[int, _Spell] = {}
        self._reported: set[str] = set()

    def forget(self) -> None:
        """A sample that could not judge (a fault, a worker stopping): every spell starts again."""
        self._spells.clear()

    def sample(self, now: float, workers: list[WorkerSample], due: list[DueRun]) -> list[Waited]:
        """Take a sample of the quiet workers and the due runs no limit applies to; returns what waited too long."""
        seen = {worker.pid for worker in workers}
        for pid in list(self._spells):
            if pid not in seen:
                del self._spells[pid]
        for worker in workers:
            spell = self._spells.get(worker.pid)
            if worker.free <= 0:
                self._spells.pop(worker.pid, None)
            elif spell is None or spell.claims != worker.claims:
                self._spells[worker.pid] = _Spell(now, worker.claims)
        idle = [(self._spells[worker.pid].since, worker) for worker in workers if worker.pid in self._spells]
        if not idle:
            return []
        since, worker = min(idle, key=lambda item: item[0])
        waited = []
        for run in due:
            together = now - max(run.due_since, run.free_since, since)
            if together >= self.patience and run.run_id not in self._reported:
                self._reported.add(run.run_id)
                waited.append(Waited(run.run_id, run.name, together, worker.pid, worker.free))
        return waited
