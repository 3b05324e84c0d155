"""A context's calls on children: ``ctx.spawn``, ``ctx.spawn_many`` and the waits for their results.

A child is made once, whatever the replays: its idempotency key is made by the
engine from the parent and the step, and it is inserted in the transaction that
journals its id under the parent's fence. A wait holds no worker: it is
registered under the run's lock, and the child's landing wakes the parent.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import timedelta
from typing import Any, Unpack

from .. import storable
from ..exceptions import InvalidInput
from ..journal_ids import StepId
from ..storable import seconds
from ..store import spawns as spawn_store
from ..store import waits as wait_store
from ..submission import RunOptions
from ..types import ChildResult, Run
from . import submit, submit_many, tracing
from .attempt import Attempt
from .call_options import SpawnOptions

_SPAWN_FORBIDDEN = ("idempotency_key", "idempotency_keys", "coalesce_key", "debounce", "tenant_id", "parent_run_id")


def _child_ids(child_run_ids: object) -> list[str]:
    """The run ids a children wait is given, validated (a list of them, not one id)."""
    if isinstance(child_run_ids, (str, bytes)) or not isinstance(child_run_ids, Iterable):
        raise InvalidInput(f"child_run_ids must be a list of run ids, got {child_run_ids!r}")
    return [storable.name(str(child_id), what="a child run id") for child_id in child_run_ids]


def _refuse_spawn_keys(options: Mapping[str, object], call: str) -> None:
    forbidden = sorted(set(options) & set(_SPAWN_FORBIDDEN))
    if forbidden:
        raise InvalidInput(f"{call}() sets {', '.join(forbidden)} itself: the step identity keys the children")


class ChildCalls:
    """The sync context's calls on children. The context provides the attempt and its run, the step
    entry (``_enter``) and the resolution of a wait's outcome (``_resolve``)."""

    _attempt: Attempt
    _run: Run

    def _enter(self, name: object, occurrence: object) -> str:
        raise NotImplementedError

    def _resolve(self, sid: str, outcome: wait_store.WaitOutcome) -> Any:
        raise NotImplementedError

    def spawn(
        self,
        name: str,
        function: str,
        input: object = None,
        *,
        occurrence: int = 0,
        **enqueue_options: Unpack[SpawnOptions],
    ) -> str:
        """Enqueue a child run (once, whatever the replays) and return its run id."""
        with self._attempt.engine_code():
            sid = self._enter(name, occurrence)
            if sid in self._attempt.journal:
                journalled_id: str = self._attempt.journal[sid]
                return journalled_id
            _refuse_spawn_keys(enqueue_options, "spawn")
            child = (
                submit.request(function, input, self._child_options(enqueue_options), parent_run_id=self._run.run_id)
                .with_engine_key(f"spawn:{self._run.run_id}:{sid}")
                # The child's spans join its parent's attempt span, whatever thread the handler runs on.
                .with_trace_context(submit.trace_context_json(tracing.context_for_children(self._attempt)))
            )
            child_id = self._attempt.persist(spawn_store.spawn, self._run.run_id, self._attempt.token, sid, child)
            self._attempt.journal[sid] = child_id
            return child_id

    def _child_options(self, enqueue_options: SpawnOptions) -> RunOptions:
        """A child's options: its parent's tenant, and what spawn was given."""
        return RunOptions.of(tenant_id=self._run.tenant_id, **enqueue_options)

    def spawn_many(
        self,
        name: str,
        function: str,
        inputs: Iterable[object],
        *,
        occurrence: int = 0,
        **enqueue_options: Unpack[SpawnOptions],
    ) -> list[str]:
        """Enqueue one child run per input as one step (once, whatever the replays); their run ids, in input order.

        Every child is inserted by one statement, with one NOTIFY, in the
        transaction that journals their ids: a crash before that commit leaves
        no child, and a replay returns the same children.
        """
        with self._attempt.engine_code():
            sid = self._enter(name, occurrence)
            if sid in self._attempt.journal:
                journalled: list[str] = self._attempt.journal[sid]
                return list(journalled)
            _refuse_spawn_keys(enqueue_options, "spawn_many")
            batch = submit_many.batch_request(
                function,
                inputs,
                self._child_options(enqueue_options),
                key_prefix=f"spawn:{self._run.run_id}:{sid}",
                parent_run_id=self._run.run_id,
            )
            if not batch.positions:
                return []
            # The children's spans join their parent's attempt span, as a spawned child's do.
            batch = batch.with_trace_context(submit.trace_context_json(tracing.context_for_children(self._attempt)))
            child_ids = self._attempt.persist(spawn_store.spawn_many, self._run.run_id, self._attempt.token, sid, batch)
            self._attempt.journal[sid] = child_ids
            return list(child_ids)

    def wait_for_all(
        self,
        name: str,
        child_run_ids: Iterable[str],
        *,
        occurrence: int = 0,
        timeout: timedelta | float | None = None,
    ) -> list[ChildResult]:
        """Wait, holding no worker, until every one of these direct children has landed; their results in order.

        The run is woken once, by the landing of the last of them. At the
        timeout the unfinished ones are cancelled (with their descendants) and
        reported as ``{"state": "timeout", "result": None, "error": None}``.
        """
        with self._attempt.engine_code():
            sid = self._enter(name, occurrence)
            if sid in self._attempt.journal:
                journalled: list[ChildResult] = self._attempt.journal[sid]
                return journalled
            ids = _child_ids(child_run_ids)
            if not ids:
                return []
            results: list[ChildResult] = self._wait_for_children(sid, ids, wait_all=True, timeout=timeout)
            return results

    def wait_for_any(
        self,
        name: str,
        child_run_ids: Iterable[str],
        *,
        occurrence: int = 0,
        timeout: timedelta | float | None = None,
    ) -> tuple[int, ChildResult] | None:
        """Wait, holding no worker, for the first of these direct children to land: ``(index, result)``.

        The others keep running. At the timeout it returns None (and cancels nothing).
        """
        with self._attempt.engine_code():
            sid = self._enter(name, occurrence)
            if sid in self._attempt.journal:
                value = self._attempt.journal[sid]
            else:
                ids = _child_ids(child_run_ids)
                if not ids:
                    raise InvalidInput("wait_for_any() needs at least one child run id")
                value = self._wait_for_children(sid, ids, wait_all=False, timeout=timeout)
            return None if value is None else (value[0], value[1])

    def _wait_for_children(
        self, sid: str, child_run_ids: list[str], *, wait_all: bool, timeout: timedelta | float | None
    ) -> Any:
        outcome = self._attempt.persist(
            wait_store.wait_for_children,
            self._run.run_id,
            self._attempt.token,
            sid,
            str(StepId.parse(sid).deadline_id()),
            child_run_ids=child_run_ids,
            wait_all=wait_all,
            timeout_seconds=seconds(timeout, what="timeout"),
        )
        return self._resolve(sid, outcome)

    def wait_for_result(
        self, name: str, child_run_id: str, *, occurrence: int = 0, timeout: timedelta | float | None = None
    ) -> ChildResult:
        """Wait for a direct child to land; returns {"state", "result", "error"}."""
        with self._attempt.engine_code():
            sid = self._enter(name, occurrence)
            if sid in self._attempt.journal:
                journalled: ChildResult = self._attempt.journal[sid]
                return journalled
            outcome = self._attempt.persist(
                wait_store.wait_for_child,
                self._run.run_id,
                self._attempt.token,
                sid,
                str(StepId.parse(sid).deadline_id()),
                child_run_id=storable.name(str(child_run_id), what="child_run_id"),
                timeout_seconds=seconds(timeout, what="timeout"),
            )
            result: ChildResult = self._resolve(sid, outcome)
            return result
