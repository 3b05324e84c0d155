"""System checks: durable_django.E001 and friends."""

from collections.abc import Sequence
from typing import Any

from django.apps import AppConfig, apps
from django.conf import settings
from django.core import checks
from django.db import router

from .conf import durable_settings


@checks.register(checks.Tags.database, checks.Tags.compatibility)
def check_database(app_configs: Sequence[AppConfig] | None = None, **kwargs: Any) -> list[checks.CheckMessage]:
    alias = durable_settings.DATABASE
    if alias not in settings.DATABASES:
        return [
            checks.Error(
                f"DURABLE['DATABASE'] names {alias!r}, which is not in DATABASES.",
                id="durable_django.E003",
            )
        ]
    engine = settings.DATABASES[alias].get("ENGINE", "")
    if engine != "django.db.backends.postgresql":
        return [
            checks.Error(
                f"durable-django needs PostgreSQL, but database {alias!r} uses {engine or 'no engine'}.",
                hint="Set its ENGINE to 'django.db.backends.postgresql' (psycopg 3).",
                id="durable_django.E001",
            )
        ]
    unrouted = [
        model._meta.label
        for model in apps.get_app_config("durable_django").get_models()
        if not router.allow_migrate_model(alias, model)
    ]
    if unrouted:
        return [
            checks.Error(
                f"DURABLE['DATABASE'] is {alias!r}, but DATABASE_ROUTERS do not migrate {', '.join(unrouted)} "
                "there, so its tables are never created on the database every durable read and write uses.",
                hint="Let your router's allow_migrate() return True for app 'durable_django' on that alias, "
                "or set DURABLE['DATABASE'] to the alias the durable_django migrations go to.",
                id="durable_django.E009",
            )
        ]
    return []


@checks.register()
def check_settings(app_configs: Sequence[AppConfig] | None = None, **kwargs: Any) -> list[checks.CheckMessage]:
    from .exceptions import InvalidInput
    from .types import RetryPolicy

    errors: list[checks.CheckMessage] = []
    lease = durable_settings.LEASE_SECONDS
    if not isinstance(lease, (int, float)) or lease <= 0:
        errors.append(checks.Error("DURABLE['LEASE_SECONDS'] must be a positive number.", id="durable_django.E002"))
    poll = durable_settings.POLL_SECONDS
    if not isinstance(poll, (int, float)) or poll <= 0:
        errors.append(checks.Error("DURABLE['POLL_SECONDS'] must be a positive number.", id="durable_django.E004"))
    try:
        RetryPolicy.from_json(durable_settings.DEFAULT_RETRY)
    except (InvalidInput, TypeError) as exc:
        errors.append(checks.Error(f"DURABLE['DEFAULT_RETRY'] is invalid: {exc}", id="durable_django.E005"))
    recoveries = durable_settings.MAX_RECOVERIES
    if not isinstance(recoveries, int) or recoveries < 0:
        errors.append(checks.Error("DURABLE['MAX_RECOVERIES'] must be an integer >= 0.", id="durable_django.E006"))
    engine_connections = durable_settings.ENGINE_CONNECTIONS
    if not isinstance(engine_connections, int) or isinstance(engine_connections, bool) or engine_connections < 1:
        errors.append(checks.Error("DURABLE['ENGINE_CONNECTIONS'] must be an integer >= 1.", id="durable_django.E030"))
    errors.extend(_schedule_errors())
    return errors


def _schedule_errors() -> list[checks.CheckMessage]:
    from .engine.schedules import declared_schedule_errors
    from .exceptions import InvalidInput
    from .limits import queue_limits
    from .values import seconds

    errors: list[checks.CheckMessage] = [
        checks.Error(f"DURABLE['SCHEDULES'] entry {schedule_id!r} is invalid: {exc}", id="durable_django.E007")
        for schedule_id, exc in declared_schedule_errors(durable_settings.SCHEDULES).items()
    ]
    try:
        seconds(durable_settings.PURGE_AFTER, what="DURABLE['PURGE_AFTER']")
    except InvalidInput as exc:
        errors.append(checks.Error(f"{exc} (a timedelta, a number of seconds, or None).", id="durable_django.E008"))
    try:
        queue_limits(durable_settings.QUEUES, what="DURABLE['QUEUES']")
    except InvalidInput as exc:
        errors.append(
            checks.Error(
                f"{exc}.", hint='e.g. {"emails": {"concurrency": 5, "rate_limit": (50, 1.0)}}', id="durable_django.E010"
            )
        )
    return errors
