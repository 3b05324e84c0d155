"""What every operator front-end (the admin, the commands) shares beyond the client API.

Retry as a new run, the bounded reads behind the admin's overview, tenant filter and limits (which go
to ``DURABLE["READ_DATABASE"]``, a replica, when one is set), and the health checks behind
``durable_health`` and the workers page.
"""

from __future__ import annotations

from uuid import UUID

from ..conf import durable_settings
from ..engine import health as health_engine
from ..engine import reruns
from ..engine.health import CheckResult, UnservedVersion
from ..exceptions import RunNotFound
from ..storable import count, name, seconds
from ..store import limit_states
from ..store import overview as overview_store
from ..store.limit_states import LimitState
from ..store.overview import Overview
from ..types import Run
from .runs import get_run

__all__ = [
    "CheckResult",
    "LimitState",
    "Overview",
    "UnservedVersion",
    "health",
    "held_by_limits",
    "known_tenants",
    "limit_state",
    "overview",
    "retry_as_new_run",
    "versions_overview",
]


def retry_as_new_run(
    run_id: str | UUID, *, tenant_id: str | UUID | None = None, idempotency_key: str | None = None
) -> Run:
    """Submit a finished run again as a new run: same function, version, input, tenant, queue, priority and
    retry policy, an empty journal. Keys are not carried over (they would join the old run);
    ``idempotency_key`` gives the new run one (a retry asked twice with it makes one run).

    Raises:
        RunNotFound: no such run is visible to ``tenant_id``.
        InvalidInput: the run has not finished.
    """
    run = get_run(run_id, tenant_id=tenant_id)
    if run is None:
        raise RunNotFound(f"no run {run_id}", run_id=str(run_id))
    return reruns.retry_as_new(run, idempotency_key=idempotency_key)


def overview() -> Overview:
    """Counts by status for the last hour and day, the oldest pending run and throughput, at a bounded cost."""
    return overview_store.overview(using=durable_settings.read_database)


def known_tenants(*, limit: int = 1000) -> list[str]:
    """Tenant ids that own at least one run, in id order, at most ``limit`` of them (an index probe each)."""
    return overview_store.known_tenants(limit=count(limit, what="limit"), using=durable_settings.read_database)


def held_by_limits(*, keys: int = 20) -> list[LimitState]:
    """The limit keys holding most due runs back, most first, each with how many it holds and how many run
    under it; reads a bounded number of held runs (a count past 10,000 is a floor)."""
    return limit_states.held_by_key(keys=count(keys, what="keys"), using=durable_settings.read_database)


def limit_state(key: str) -> LimitState:
    """How many runs one limit key (a ``Run.held_by`` value) holds back and how many run under it now."""
    return limit_states.key_state(name(key, what="a limit key"))


def health(*, max_oldest_pending: float | None = None, max_parked: int | None = None) -> list[CheckResult]:
    """The health checks, one result each: database, migrations, workers, [oldest-pending,] stranded, versions,
    parked.

    Args:
        max_oldest_pending: seconds a due run may wait to be claimed; None leaves that check out.
        max_parked: how many parked runs pass; None: parked runs are counted, never failed.
    """
    seconds(max_oldest_pending, what="max_oldest_pending")
    return health_engine.run_checks(max_oldest_pending=max_oldest_pending, max_parked=max_parked)


def versions_overview() -> tuple[dict[str, list[int]], list[UnservedVersion]]:
    """The versions live workers register (function -> versions), and the due runs' versions none of them does."""
    workers = health_engine.live_workers()
    return health_engine.live_versions(workers), health_engine.unserved_versions(workers)
