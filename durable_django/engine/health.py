"""Is the durable system healthy? The checks behind ``manage.py durable_health`` and the workers page.

Each check answers in a few bounded statements however many runs the table
holds, and reports a failure as a result, never as an exception: a probe must
get one line per check and an exit status. A check that depends on an earlier
one (the database, then the migrations) fails with the reason when that one did.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

from ..conf import durable_settings
from ..registry import TASK_PATH_VERSION, registry
from ..store import health as health_store
from ..store import pauses as pause_store
from ..store import workers as worker_store
from ..store.db import connection
from .preflight import missing_migrations
from .reconciler import Reconciler


@dataclass(frozen=True, slots=True)
class CheckResult:
    """One check's verdict and what it saw."""

    check: str
    ok: bool
    detail: str

    def __str__(self) -> str:
        return f"{'OK' if self.ok else 'FAIL'} {self.check}: {self.detail}"


@dataclass(frozen=True, slots=True, kw_only=True)
class UnservedVersion:
    """A (function, version) with due runs that no live worker registers, and the versions live workers have."""

    name: str
    version: int
    live_versions: list[int]

    def __str__(self) -> str:
        have = (
            f"live workers register v{', v'.join(map(str, self.live_versions))}"
            if self.live_versions
            else "no live worker registers it"
        )
        return f"{self.name} v{self.version} ({have})"


def live_window() -> float:
    """A worker seen within three leases is live: it heartbeats three times per lease."""
    return 3 * float(durable_settings.LEASE_SECONDS)


def live_workers() -> list[worker_store.LiveWorker]:
    return worker_store.live(live_window())


def live_versions(workers: list[worker_store.LiveWorker]) -> dict[str, list[int]]:
    """function -> the versions the live workers register, together."""
    versions: dict[str, set[int]] = {}
    for worker in workers:
        for name, registered in worker.functions.items():
            versions.setdefault(name, set()).update(registered)
    return {name: sorted(found) for name, found in sorted(versions.items())}


def registered_versions(name: str) -> list[int]:
    """The versions of ``name`` this process or a live worker registers."""
    local = {version for known, version in registry.pairs([name]) if known == name}
    return sorted(local | set(live_versions(live_workers()).get(name, [])))


def unserved_versions(
    workers: list[worker_store.LiveWorker], pending: list[health_store.PendingPair] | None = None
) -> list[UnservedVersion]:
    """(function, version) pairs with due runs (pending, or waits whose deadline passed) no live worker registers.

    Django Tasks runs (version 0) are left out: any worker in which their path imports runs them.

    Args:
        workers: the live workers.
        pending: the pending pairs, if already read (they are read otherwise).
    """
    window = live_window()
    if pending is None:
        pending = health_store.pending_pairs(live_within=window)
    unserved = {(pair.name, pair.version) for pair in pending if pair.oldest_run_id is not None and not pair.registered}
    unserved |= {
        (name, version)
        for name, version, registered in health_store.due_wait_pairs(live_within=window)
        if not registered
    }
    have = live_versions(workers)
    return [
        UnservedVersion(name=name, version=version, live_versions=have.get(name, []))
        for name, version in sorted(unserved)
        if version != TASK_PATH_VERSION
    ]


def run_checks(*, max_oldest_pending: float | None = None, max_parked: int | None = None) -> list[CheckResult]:
    """Every check, in order; ``oldest-pending`` only with ``max_oldest_pending`` (seconds); ``parked`` fails
    past ``max_parked`` runs (None: it only counts them)."""
    results: list[CheckResult] = []
    blocked: str | None = None
    workers: list[worker_store.LiveWorker] = []

    def check_workers() -> CheckResult:
        nonlocal workers
        workers = live_workers()
        return _workers(workers)

    @functools.cache
    def pending() -> list[health_store.PendingPair]:
        """The pending (function, version) pairs, read once for oldest-pending and versions."""
        return health_store.pending_pairs(live_within=live_window())

    steps: list[tuple[str, Callable[[], CheckResult]]] = [
        ("database", _database),
        ("migrations", _migrations),
        ("workers", check_workers),
    ]
    if max_oldest_pending is not None:
        steps.append(("oldest-pending", lambda: _oldest_pending(pending(), max_oldest_pending)))
    steps += [
        ("stranded", lambda: _stranded(worker_live=bool(workers))),
        ("versions", lambda: _versions(unserved_versions(workers, pending()))),
        ("parked", lambda: _parked(max_parked)),
        ("paused", _paused),
    ]
    for check, run in steps:
        if blocked is not None:
            results.append(CheckResult(check, False, f"not checked: {blocked}"))
            continue
        try:
            result = run()
        except Exception as exc:  # noqa: BLE001 - a probe gets a FAIL line, never a traceback
            result = CheckResult(check, False, f"could not check: {_one_line(exc)}")
        results.append(result)
        if not result.ok and check == "database":
            blocked = "the database cannot be reached"
        elif not result.ok and check == "migrations":
            blocked = "the durable_django migrations are not all applied"
    return results


def _database() -> CheckResult:
    alias = durable_settings.DATABASE
    try:
        version = health_store.server_version()
    except Exception as exc:  # noqa: BLE001 - any failure to connect is the answer
        connection().close()
        return CheckResult("database", False, f"cannot reach database {alias!r}: {_one_line(exc)}")
    return CheckResult("database", True, f"{alias!r} answers (PostgreSQL {version})")


def _migrations() -> CheckResult:
    missing = missing_migrations()
    if missing:
        return CheckResult(
            "migrations",
            False,
            f"not applied: {', '.join(missing)} (run manage.py migrate durable_django)",
        )
    return CheckResult("migrations", True, "all durable_django migrations are applied")


def _workers(workers: list[worker_store.LiveWorker]) -> CheckResult:
    window = live_window()
    if not workers:
        return CheckResult("workers", False, f"no worker seen within the last {window:.0f}s (three leases)")
    latest = workers[0]
    return CheckResult(
        "workers",
        True,
        f"{len(workers)} live, the latest seen {latest.seen_ago:.0f}s ago ({latest.host} pid {latest.pid})",
    )


def _oldest_pending(pending: list[health_store.PendingPair], limit: float) -> CheckResult:
    pairs = [pair for pair in pending if pair.waited_seconds is not None]
    if not pairs:
        return CheckResult("oldest-pending", True, "no run is due and waiting to be claimed")
    oldest = max(pairs, key=lambda pair: pair.waited_seconds or 0.0)
    waited = oldest.waited_seconds or 0.0
    what = f"run {oldest.oldest_run_id} ({oldest.name} v{oldest.version}) has waited {waited:.0f}s to be claimed"
    if waited > limit:
        return CheckResult("oldest-pending", False, f"{what}, more than {limit:g}s")
    return CheckResult("oldest-pending", True, f"the oldest due {what} (at most {limit:g}s)")


def _parked(limit: int | None) -> CheckResult:
    parked = health_store.parked_runs()
    if limit is not None and parked > limit:
        return CheckResult("parked", False, f"{parked} (more than {limit} runs wait for an operator)")
    return CheckResult("parked", True, str(parked))


def _stranded(*, worker_live: bool) -> CheckResult:
    found = Reconciler().any_stranded(worker_live=worker_live)
    if not found:
        return CheckResult("stranded", True, "no run is stranded")
    first = found[0]
    more = f" (and {len(found) - 1} more found)" if len(found) > 1 else ""
    return CheckResult("stranded", False, f"run {first.run_id} {first.problem}{more}")


def _versions(unserved: list[UnservedVersion]) -> CheckResult:
    if unserved:
        return CheckResult(
            "versions", False, "due runs no live worker can run: " + "; ".join(str(item) for item in unserved)
        )
    return CheckResult("versions", True, "every due run's function and version is registered by a live worker")


def _paused() -> CheckResult:
    """What is paused: never a failure (an operator paused it), but a probe's reader should know."""
    found = pause_store.list_pauses()
    if not found:
        return CheckResult("paused", True, "nothing is paused")
    described = [
        (f"function {p.function}" if p.function else f"queue {p.queue}") + (f" ({p.reason})" if p.reason else "")
        for p in found
    ]
    return CheckResult("paused", True, ", ".join(described))


def _one_line(exc: BaseException) -> str:
    message = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__
