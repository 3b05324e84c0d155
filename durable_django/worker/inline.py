"""Execute claimable runs in the calling thread (durable_django.testing.run_until_idle)."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from asgiref.sync import async_to_sync

from ..engine import execute as executor
from ..engine import lifecycle, time_limits


def drain(
    *,
    functions: list[str] | None = None,
    queues: list[str] | None = None,
    tenant_id: str | None = None,
    max_runs: int = 10_000,
) -> int:
    bounds = lifecycle.claim_bounds(functions=functions, queues=queues, tenant_id=tenant_id)
    while time_limits.expire_past_deadlines() == time_limits.SWEEP_BATCH:
        pass
    executed = 0
    while executed < max_runs:
        claimed = lifecycle.claim(limit=1, start_now=1, worker_id="inline", bounds=bounds)
        if not claimed:
            return executed
        executor.execute(claimed[0], run_loop=run_bridged)
        executed += 1
    raise RuntimeError(f"run_until_idle executed {max_runs} attempts and runs were still claimable")


def run_bridged(main: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
    """Run an async handler's loop through asgiref, as Django runs async code from sync code.

    The caller may itself be sync code that ``sync_to_async`` runs for an async
    test: with the default ``thread_sensitive=True`` this thread is the one
    every thread-sensitive call must reach, so a plain ``asyncio.run`` here
    would leave the handler's ORM calls (``acount()``, ``sync_to_async``) to
    wait for a thread that waits for them. ``async_to_sync`` runs the loop on a
    thread of its own and serves those calls in this thread until it ends.
    """
    return async_to_sync(main, force_new_loop=True)()
