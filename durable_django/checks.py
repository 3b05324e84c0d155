"""System checks: durable_django.E001 and friends."""

from collections.abc import Sequence
from typing import Any

from django.apps import AppConfig, apps
from django.conf import settings
from django.core import checks
from django.db import router

from .conf import behind_transaction_pooler, durable_settings
from .settings_rules import setting_problems
from .storable import unstorable_char

# PgBouncer's default port: an alias on it is most likely behind PgBouncer.
PGBOUNCER_PORT = "6432"


# Not tagged "database": Django runs those only at migrate or with check --database, and a newcomer on
# startproject's SQLite must learn at their first `manage.py check`. It reads settings only.
@checks.register(checks.Tags.compatibility)
def check_database(app_configs: Sequence[AppConfig] | None = None, **kwargs: Any) -> list[checks.CheckMessage]:
    alias = durable_settings.DATABASE
    if not _is_alias(alias):
        return []  # the DATABASE rule says so
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
    """Every ``DURABLE`` key against its rule (settings_rules), and each declared schedule."""
    messages: list[checks.CheckMessage] = [
        (checks.Warning if problem.warning else checks.Error)(problem.message, hint=problem.hint, id=problem.check_id)
        for problem in setting_problems()
    ]
    messages.extend(_schedule_entry_errors())
    return messages


def _schedule_entry_errors() -> list[checks.CheckMessage]:
    from .engine.schedules import declared_schedule_errors

    declared = durable_settings.SCHEDULES
    if not isinstance(declared, dict):
        return []  # the SCHEDULES rule says so
    return [
        checks.Error(f"DURABLE['SCHEDULES'] entry {schedule_id!r} is invalid: {exc}", id="durable_django.E007")
        for schedule_id, exc in declared_schedule_errors(declared).items()
    ]


@checks.register(checks.Tags.database)
def check_deployment(app_configs: Sequence[AppConfig] | None = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """LISTEN_DATABASE, READ_DATABASE and PREPARED_STATEMENTS against the aliases they name."""
    messages = [
        *_alias_errors("LISTEN_DATABASE", durable_settings.LISTEN_DATABASE, "durable_django.E201"),
        *_alias_errors("READ_DATABASE", durable_settings.READ_DATABASE, "durable_django.E203"),
    ]
    listen = durable_settings.LISTEN_DATABASE
    if _is_alias(listen) and listen in settings.DATABASES and behind_transaction_pooler(listen):
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


def _is_alias(value: object) -> bool:
    """Whether a setting can name an alias at all (a storable string); what cannot, its rule reports."""
    return isinstance(value, str) and bool(value) and unstorable_char(value) is None


def _alias_errors(key: str, alias: str | None, check_id: str) -> list[checks.CheckMessage]:
    if not _is_alias(alias):
        return []  # None, or a value its rule reports
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
    if setting is not True and setting is not False and setting != "auto":
        return []  # the PREPARED_STATEMENTS rule says so
    messages: list[checks.CheckMessage] = []
    for alias in dict.fromkeys([durable_settings.DATABASE, durable_settings.read_database]):
        if not _is_alias(alias) or alias not in settings.DATABASES:
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
