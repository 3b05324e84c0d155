"""The rule of every ``DURABLE`` key, each with a stable check id.

``manage.py check`` reports what breaks a rule (``checks.py``), and a worker
refuses to start on it (``durable_worker``, through the engine's preflight):
a value that passes here is one every worker thread can run with. The rules
are the storable domain's (``values``); an unknown key is a warning naming the
closest known one, since a typo would otherwise be ignored in silence.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from .conf import DurableSettings, durable_settings
from .exceptions import InvalidInput
from .storable import JSONB_MAX_BYTES, count, integer, name, seconds, shown

UNKNOWN_KEY_ID = "durable_django.W015"
NOT_A_DICT_ID = "durable_django.E014"


@dataclass(frozen=True, slots=True)
class SettingProblem:
    """One key's value that breaks its rule (or, with ``warning``, a key no rule knows)."""

    check_id: str
    message: str
    hint: str | None = None
    warning: bool = False


def _positive_seconds(value: object, what: str) -> None:
    seconds(value, what=what, allow_none=False, positive=True)


def _optional_seconds(value: object, what: str) -> None:
    seconds(value, what=what)


def _retry_policy(value: object, what: str) -> None:
    from .types import RetryPolicy

    if not isinstance(value, Mapping):
        raise InvalidInput(f"{what} must be a dict of RetryPolicy fields, got {shown(value)}")
    try:
        RetryPolicy.from_json(value)
    except TypeError as exc:  # an unknown field
        raise InvalidInput(f"{what}: {exc}") from None


def _alias(value: object, what: str) -> None:
    name(value, what=what)


def _optional_alias(value: object, what: str) -> None:
    if value is not None:
        name(value, what=what)


def _schedules(value: object, what: str) -> None:
    if not isinstance(value, Mapping):
        raise InvalidInput(f"{what} must be a dict of schedule id -> entry, got {shown(value)}")


def _queues(value: object, what: str) -> None:
    from .flow_control import queue_limits

    queue_limits(value, what=what)  # type: ignore[arg-type]  # a non-mapping is refused there


def _prepared_statements(value: object, what: str) -> None:
    if value is not True and value is not False and value != "auto":
        raise InvalidInput(f"{what} must be True, False or 'auto', got {shown(value)}")


def _max_recoveries(value: object, what: str) -> None:
    integer(value, what=what, minimum=0)


def _engine_connections(value: object, what: str) -> None:
    count(value, what=what)


def _boolean(value: object, what: str) -> None:
    if value is not True and value is not False:
        raise InvalidInput(f"{what} must be True or False, got {shown(value)}")


def _max_value_bytes(value: object, what: str) -> None:
    integer(value, what=what, minimum=1, maximum=JSONB_MAX_BYTES)


@dataclass(frozen=True, slots=True)
class Rule:
    check_id: str
    check: Callable[[object, str], None]
    expected: str


RULES: dict[str, Rule] = {
    "LEASE_SECONDS": Rule("durable_django.E002", _positive_seconds, "a positive number of seconds"),
    "DATABASE": Rule("durable_django.E003", _alias, "the alias of a PostgreSQL database in DATABASES"),
    "POLL_SECONDS": Rule("durable_django.E004", _positive_seconds, "a positive number of seconds"),
    "DEFAULT_RETRY": Rule("durable_django.E005", _retry_policy, "a dict of RetryPolicy fields"),
    "MAX_RECOVERIES": Rule("durable_django.E006", _max_recoveries, "an integer >= 0"),
    "SCHEDULES": Rule("durable_django.E007", _schedules, "a dict of schedule id -> entry"),
    "PURGE_AFTER": Rule("durable_django.E008", _optional_seconds, "a timedelta, a number of seconds, or None"),
    "QUEUES": Rule("durable_django.E010", _queues, 'e.g. {"emails": {"concurrency": 5, "rate_limit": (50, 1.0)}}'),
    "SUMMARY_SECONDS": Rule("durable_django.E011", _positive_seconds, "a positive number of seconds"),
    "RECONCILE_SECONDS": Rule("durable_django.E012", _positive_seconds, "a positive number of seconds"),
    "MAX_VALUE_BYTES": Rule("durable_django.E013", _max_value_bytes, f"an integer from 1 to {JSONB_MAX_BYTES}"),
    "METRICS_ADDRESS": Rule(
        "durable_django.E020", _alias, 'the address --metrics-port binds, a string such as "127.0.0.1"'
    ),
    "ENGINE_CONNECTIONS": Rule("durable_django.E030", _engine_connections, "an integer >= 1"),
    "STRICT_REPLAY": Rule("durable_django.E031", _boolean, "True or False"),
    "LISTEN_DATABASE": Rule("durable_django.E201", _optional_alias, "None or an alias in DATABASES"),
    "READ_DATABASE": Rule("durable_django.E203", _optional_alias, "None or an alias in DATABASES"),
    "PREPARED_STATEMENTS": Rule("durable_django.E204", _prepared_statements, "True, False or 'auto'"),
}


def known_keys() -> list[str]:
    """Every key ``DURABLE`` may hold: the settings' declared keys."""
    return sorted(key for key in vars(DurableSettings) if key.isupper())


def setting_problems() -> list[SettingProblem]:
    """What breaks a rule in ``DURABLE`` now: errors for bad values, warnings for unknown keys."""
    from django.conf import settings

    configured = getattr(settings, "DURABLE", None)
    if configured is None:
        configured = {}
    if not isinstance(configured, Mapping):
        return [SettingProblem(NOT_A_DICT_ID, f"DURABLE must be a dict of settings, got {shown(configured)}.")]
    problems = [_unknown_key(key) for key in configured if key not in RULES]
    for key, rule in RULES.items():
        what = f"DURABLE[{key!r}]"
        try:
            rule.check(getattr(durable_settings, key), what)
        except InvalidInput as exc:
            problems.append(SettingProblem(rule.check_id, f"{exc} ({rule.expected})."))
    return problems


def _unknown_key(key: object) -> SettingProblem:
    closest = difflib.get_close_matches(str(key), known_keys(), n=1)
    return SettingProblem(
        UNKNOWN_KEY_ID,
        f"DURABLE has an unknown key {shown(key)}, which nothing reads.",
        hint=f"Did you mean {closest[0]!r}?" if closest else f"The known keys: {', '.join(known_keys())}.",
        warning=True,
    )
