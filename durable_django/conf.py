"""durable-django settings: the keys of the ``DURABLE`` dict, with defaults.

Read at attribute access, so ``override_settings`` and pytest-django's
``settings`` fixture apply at once. Every key is documented in docs/settings.md.
"""

from datetime import timedelta
from typing import Any

from django.conf import settings


class DurableSettings:
    LEASE_SECONDS: float = 30
    POLL_SECONDS = 5.0
    DEFAULT_RETRY: dict[str, Any] = {
        "max_attempts": 3,
        "initial_delay": 1.0,
        "max_delay": 300.0,
        "backoff": 2.0,
        "jitter": 1.0,
    }
    MAX_RECOVERIES = 10
    DATABASE = "default"
    # Declared cron schedules, synced when a worker starts (see docs/schedules.md).
    SCHEDULES: dict[str, Any] = {}
    # Purge finished runs older than this from inside the worker (None: never).
    PURGE_AFTER: timedelta | float | None = None
    # Prepare the store's statements on the server (set False behind a pooler that cannot keep them).
    PREPARED_STATEMENTS = True
    # The most connections a worker process's engine holds (claims, heartbeats, journal writes, landings),
    # whatever its --concurrency; its LISTEN session is one more, and handlers' own queries are not counted.
    ENGINE_CONNECTIONS = 4
    # How often the worker logs its summary line.
    SUMMARY_SECONDS = 60.0
    # Per-queue limits across every worker: {"emails": {"concurrency": 5, "rate_limit": (50, 1.0)}}.
    QUEUES: dict[str, Any] = {}
    # How often a worker looks for stranded runs and repairs them (one worker at a time does).
    RECONCILE_SECONDS = 60.0

    def __getattribute__(self, name: str) -> Any:
        if name.isupper():
            configured = getattr(settings, "DURABLE", None) or {}
            if name in configured:
                return configured[name]
        return super().__getattribute__(name)

    @property
    def heartbeat_seconds(self) -> float:
        """The worker renews leases three times per lease."""
        return self.LEASE_SECONDS / 3


durable_settings = DurableSettings()
