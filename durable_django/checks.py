"""System checks: durable_django.E001 and friends."""

from collections.abc import Sequence
from typing import Any

from django.apps import AppConfig, apps
from django.conf import settings
from django.core import checks
from django.db import router

from .conf import behind_transaction_pooler, durable_settings

# PgBouncer's default port: an alias on it is most likely behind PgBouncer.
PGBOUNCER_PORT = "6432"


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
    address = durable_settings.METRICS_ADDRESS
    if not isinstance(address, str):
        errors.append(
            checks.Error(
                "DURABLE['METRICS_ADDRESS'] must be a string: the address --metrics-port binds (\"0.0.0.0\": all).",
                id="durable_django.E020",
            )
        )
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


@checks.register(checks.Tags.database)
def check_deployment(app_configs: Sequence[AppConfig] | None = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """LISTEN_DATABASE, READ_DATABASE and PREPARED_STATEMENTS against the aliases they name."""
    messages = [
        *_alias_errors("LISTEN_DATABASE", durable_settings.LISTEN_DATABASE, "durable_django.E201"),
        *_alias_errors("READ_DATABASE", durable_settings.READ_DATABASE, "durable_django.E203"),
    ]
    listen = durable_settings.LISTEN_DATABASE
    if listen in settings.DATABASES and behind_transaction_pooler(listen):
        messages.append(
            checks.Warning(
                f"DURABLE['LISTEN_DATABASE'] is {listen!r}, whose DISABLE_SERVER_SIDE_CURSORS says it goes through "
                "a transaction pooler: a LISTEN there is lost when its transaction ends, so workers would never wake.",
                hint="Point LISTEN_DATABASE at an alias that reaches PostgreSQL directly, bypassing the pooler.",
                id="durable_django.W202",
            )
        )
    messages.extend(_prepared_statement_messages())
    return messages


def _alias_errors(key: str, alias: str | None, check_id: str) -> list[checks.CheckMessage]:
    if alias is None:
        return []
    if alias not in settings.DATABASES:
        return [checks.Error(f"DURABLE[{key!r}] names {alias!r}, which is not in DATABASES.", id=check_id)]
    engine = settings.DATABASES[alias].get("ENGINE", "")
    if engine != "django.db.backends.postgresql":
        return [
            checks.Error(
                f"DURABLE[{key!r}] is {alias!r}, which uses {engine or 'no engine'}, not PostgreSQL.",
                hint="It must reach the PostgreSQL database the durable tables live in (a replica of it, "
                "for READ_DATABASE).",
                id=check_id,
            )
        ]
    return []


def _prepared_statement_messages() -> list[checks.CheckMessage]:
    setting = durable_settings.PREPARED_STATEMENTS
    if setting not in (True, False, "auto"):
        return [checks.Error("DURABLE['PREPARED_STATEMENTS'] must be True, False or 'auto'.", id="durable_django.E204")]
    messages: list[checks.CheckMessage] = []
    for alias in dict.fromkeys([durable_settings.DATABASE, durable_settings.read_database]):
        if alias not in settings.DATABASES:
            continue  # E003 or E203 says so
        if setting is True and behind_transaction_pooler(alias):
            messages.append(
                checks.Warning(
                    f"DURABLE['PREPARED_STATEMENTS'] is True, but alias {alias!r} has DISABLE_SERVER_SIDE_CURSORS, "
                    "the sign of a transaction pooler: a statement prepared in one server session is unknown in the "
                    'next ("prepared statement ... does not exist" / "already exists").',
                    hint="Leave PREPARED_STATEMENTS at 'auto' (off behind a pooler) unless your pooler keeps "
                    "prepared statements (PgBouncer 1.21+ with max_prepared_statements).",
                    id="durable_django.W205",
                )
            )
        elif (
            setting is not False
            and not behind_transaction_pooler(alias)
            and str(settings.DATABASES[alias].get("PORT", "")) == PGBOUNCER_PORT
        ):
            messages.append(
                checks.Warning(
                    f"Alias {alias!r} uses port {PGBOUNCER_PORT}, PgBouncer's, without DISABLE_SERVER_SIDE_CURSORS: "
                    "if it goes through PgBouncer in transaction mode, prepared statements and LISTEN break there.",
                    hint="Behind a transaction pooler set DISABLE_SERVER_SIDE_CURSORS = True on the alias (Django "
                    "asks for it too) and DURABLE['LISTEN_DATABASE'] to a direct alias; in session mode, or if it "
                    "is not PgBouncer, silence this warning.",
                    id="durable_django.W206",
                )
            )
    return messages
