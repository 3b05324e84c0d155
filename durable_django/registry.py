"""Durable functions by stable name and version. No database access here."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

from . import storable
from .exceptions import DuplicateRegistration, InvalidInput, UnknownFunction
from .flow_control import Concurrency, RateLimit
from .types import RetryPolicy

# Version 0 is reserved for Django Tasks runs, which are resolved by import path.
TASK_PATH_VERSION = 0
_NAME_PATTERN = re.compile(r"[A-Za-z_][\w.\-:]*")

# A durable function: called as ``fn(ctx, input)`` with the engine's Context (or, for an ``async def``,
# its AsyncContext, and awaited). The registry stores both kinds and never calls them, so it does not
# spell out the context (the engine, above it, defines the contexts).
Handler = Callable[..., Any]
_H = TypeVar("_H", bound=Handler)


@dataclass(frozen=True, slots=True)
class Registration:
    name: str
    version: int
    fn: Handler
    retry: RetryPolicy | None  # None: DURABLE["DEFAULT_RETRY"] at enqueue time
    concurrency: Concurrency | None = None
    rate_limit: RateLimit | None = None
    # Seconds an attempt may run before it fails with AttemptTimedOut (None: no limit).
    timeout: float | None = None

    @property
    def origin(self) -> str:
        return f"{self.fn.__module__}.{self.fn.__qualname__}"


class Registry:
    """Maps (name, version) to the callable that executes it."""

    def __init__(self) -> None:
        self._by_name: dict[str, dict[int, Registration]] = {}
        self._lock = threading.Lock()
        # Turns the import path of a version-0 run into its handler; a plug-in installs it.
        self._path_resolver: Callable[[str], Handler] | None = None

    def set_path_resolver(self, resolver: Callable[[str], Handler] | None) -> None:
        """Install how runs named by an import path (version 0, the Django Tasks plug-in's) find their handler.

        The resolver takes the path and returns a ``(ctx, input)`` handler, or
        raises ImportError when the path names nothing it may run.
        """
        self._path_resolver = resolver

    def runs_task_paths(self) -> bool:
        """Does a plug-in here run the runs named by an import path (the Django Tasks backend's)?"""
        return self._path_resolver is not None

    def resolve(self, name: str, version: int) -> Handler:
        """The callable that executes a run of (name, version).

        Raises:
            UnknownFunction: nothing here runs it.
            ImportError: a version-0 path the resolver refuses.
        """
        if version != TASK_PATH_VERSION:
            return self.get(name, version).fn
        if self._path_resolver is None:
            raise UnknownFunction(
                f"run {name!r} is named by an import path, and no plug-in here resolves those "
                "(is Django's tasks framework installed?)",
                name=name,
                version=version,
            )
        return self._path_resolver(name)

    def register(
        self,
        name: str,
        version: int,
        fn: Handler,
        retry: RetryPolicy | None,
        *,
        concurrency: Concurrency | None = None,
        rate_limit: RateLimit | None = None,
        timeout: object = None,
    ) -> Registration:
        validate_name(name)
        storable.integer(version, what=f"version of {name!r}", minimum=1)
        if concurrency is not None and not isinstance(concurrency, Concurrency):
            raise InvalidInput(f"concurrency of {name!r} must be a Concurrency")
        if rate_limit is not None and not isinstance(rate_limit, RateLimit):
            raise InvalidInput(f"rate_limit of {name!r} must be a RateLimit")
        if retry is not None and not isinstance(retry, RetryPolicy):
            raise InvalidInput(f"retry of {name!r} must be a RetryPolicy")
        timeout_seconds = storable.seconds(timeout, what=f"timeout of {name!r}", positive=True)
        registration = Registration(name, version, fn, retry, concurrency, rate_limit, timeout_seconds)
        with self._lock:
            versions = self._by_name.setdefault(name, {})
            existing = versions.get(version)
            # A re-import of the same module registers the same origin again: allowed.
            if existing is not None and existing.origin != registration.origin:
                raise DuplicateRegistration(
                    f"durable function {name!r} version {version} is registered twice: "
                    f"by {existing.origin} and by {registration.origin}"
                )
            versions[version] = registration
        return registration

    def get(self, name: str, version: int) -> Registration:
        try:
            return self._by_name[name][version]
        except KeyError:
            raise UnknownFunction(
                f"no durable function {name!r} version {version} is registered", name=name, version=version
            ) from None

    def newest(self, name: str) -> Registration:
        versions = self._by_name.get(name)
        if not versions:
            raise UnknownFunction(f"no durable function {name!r} is registered", name=name)
        return versions[max(versions)]

    def timeout_of(self, name: str, version: int) -> float | None:
        """The attempt timeout of (name, version) in seconds, or None (none, or not registered here)."""
        registration = self._by_name.get(name, {}).get(version)
        return None if registration is None else registration.timeout

    def knows(self, name: str) -> bool:
        return name in self._by_name

    def names(self) -> list[str]:
        return sorted(self._by_name)

    def pairs(self, names: list[str] | None = None) -> list[tuple[str, int]]:
        """Every registered (name, version), optionally only for some names."""
        wanted = set(names) if names else None
        return sorted(
            (name, version)
            for name, versions in self._by_name.items()
            if wanted is None or name in wanted
            for version in versions
        )

    def unregister(self, name: str, version: int | None = None) -> None:
        """Forget a registration (tests use this to simulate a redeploy)."""
        with self._lock:
            if version is None:
                self._by_name.pop(name, None)
            else:
                self._by_name.get(name, {}).pop(version, None)
                if not self._by_name.get(name):
                    self._by_name.pop(name, None)


registry = Registry()


def validate_name(name: object) -> None:
    """A durable function's name: a storable name made of letters, digits, ``_``, ``.``, ``-`` and ``:``."""
    storable.name(name, what="a durable function name")
    assert isinstance(name, str)  # storable.name() let it through
    if not _NAME_PATTERN.fullmatch(name):
        raise InvalidInput(f"invalid durable function name {storable.shown(name)}")


def durable_function(
    name: str,
    *,
    version: int = 1,
    retry: RetryPolicy | None = None,
    concurrency: Concurrency | None = None,
    rate_limit: RateLimit | None = None,
    timeout: timedelta | float | None = None,
) -> Callable[[_H], _H]:
    """Register the decorated function as durable function ``name`` at ``version``.

    Args:
        name: the stable name runs are enqueued under; renaming it is a protocol change.
        version: bump it when a change alters step order, meaning or result shape.
        retry: the policy snapshotted into each run; ``DURABLE["DEFAULT_RETRY"]`` if None.
        concurrency: at most this many of its runs (per key) hold an attempt at once, across every worker.
        rate_limit: at most this many of its attempts start per window (per key), across every worker.
        timeout: an attempt that runs longer (a timedelta or seconds) fails with AttemptTimedOut and is
            retried per the policy: an async handler is cancelled, a sync handler's thread is abandoned
            (its slot goes to new work, and nothing it writes later is accepted).

    Returns:
        The function itself, unchanged, so it can still be called directly.
    """

    def decorate(fn: _H) -> _H:
        registry.register(name, version, fn, retry, concurrency=concurrency, rate_limit=rate_limit, timeout=timeout)
        return fn

    return decorate
