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
    # A replay that diverges from its journal fails its attempt (NonDeterministicReplay) instead of going on.
    STRICT_REPLAY: bool = False
    # Prepare the store's statements on the server: True, False, or "auto" (off on an alias that goes
    # through a transaction pooler, which Django's DISABLE_SERVER_SIDE_CURSORS = True says).
    PREPARED_STATEMENTS: bool | str = "auto"
    # An alias that reaches PostgreSQL without a transaction pooler, for LISTEN (None: see listen_database).
    LISTEN_DATABASE: str | None = None
    # An alias (a read replica) that the admin's listings and overview read from (None: DATABASE).
    READ_DATABASE: str | None = None
    # The most connections a worker process's engine holds (claims, heartbeats, journal writes, landings),
    # whatever its --concurrency; its LISTEN session is one more, and handlers' own queries are not counted.
    ENGINE_CONNECTIONS = 4
    # How often the worker logs its summary line.
    SUMMARY_SECONDS = 60.0
    # Per-queue limits across every worker: {"emails": {"concurrency": 5, "rate_limit": (50, 1.0)}}.
    QUEUES: dict[str, Any] = {}
    # How often a worker looks for stranded runs and repairs them (one worker at a time does).
    RECONCILE_SECONDS = 60.0
    # The address ``durable_worker --metrics-port`` binds: loopback, so only this host can scrape it; in a
    # container scraped from outside, "0.0.0.0" (every interface).
    METRICS_ADDRESS = "127.0.0.1"
    # The most bytes (UTF-8 JSON) one stored value may take: an input, an output, a step value, a signal.
    MAX_VALUE_BYTES = 64 * 2**20

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

    @property
    def read_database(self) -> str:
        """The alias the admin's listings and overview read from."""
        return self.READ_DATABASE or self.DATABASE

    @property
    def listen_database(self) -> str | None:
        """The alias LISTEN sessions use; None when the only way in is a transaction pooler (then poll).

        A LISTEN on a pooled connection is lost as soon as its transaction ends,
        so without LISTEN_DATABASE an alias behind a pooler is never listened on.
        """
        if self.LISTEN_DATABASE:
            return self.LISTEN_DATABASE
        return None if behind_transaction_pooler(self.DATABASE) else self.DATABASE

    def prepares_statements(self, alias: str) -> bool:
        """Whether the store prepares its statements on ``alias`` (PREPARED_STATEMENTS, "auto" by the pooler rule)."""
        setting = self.PREPARED_STATEMENTS
        if setting == "auto":
            return not behind_transaction_pooler(alias)
        return bool(setting)


def behind_transaction_pooler(alias: str) -> bool:
    """Whether ``alias`` goes through a transaction pooler such as PgBouncer in transaction mode.

    Django's documentation asks for ``DISABLE_SERVER_SIDE_CURSORS = True`` on
    exactly such an alias, so that is the sign we read: a pooler cannot be seen
    from the client, and session state (prepared statements, LISTEN, session
    locks, SET) does not survive from one transaction to the next through it.
    """
    return bool(settings.DATABASES.get(alias, {}).get("DISABLE_SERVER_SIDE_CURSORS"))


durable_settings = DurableSettings()
