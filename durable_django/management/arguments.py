"""Argument types of the durable management commands: each checks its text against the storable domain.

A value the API would refuse (a NUL, or a lone surrogate that Python made of an
undecodable byte in argv; a name past its length; an integer past PostgreSQL's
``integer``; NaN; JSON too deep or not JSON) is an ``argparse.ArgumentTypeError``,
which the command reports as one line and a non-zero exit, never a traceback. The
rules are ``durable_django.storable``'s; these only turn text into the value.
"""

from __future__ import annotations

import argparse
import re
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar

from .. import storable
from ..exceptions import InvalidInput
from ..states import MAX_PRIORITY, MIN_PRIORITY

# The most threads one worker process runs handlers on: far more than two cores (or twenty) keep busy,
# and each thread holds its stack and, under load, a connection of its own. Scale out with processes.
MAX_CONCURRENCY = 1024

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$")
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
# More characters than any integer a column holds (int() of thousands of digits is slow, then refused).
_MAX_INTEGER_CHARS = 24

_T = TypeVar("_T")


def _refusing(check: Callable[[], _T]) -> _T:
    try:
        return check()
    except InvalidInput as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _whole_number(text: str, what: str) -> int:
    stripped = text.strip()
    if len(stripped) > _MAX_INTEGER_CHARS or not re.fullmatch(r"[+-]?\d+", stripped):
        raise argparse.ArgumentTypeError(f"{what} must be an integer, got {storable.shown(text)}")
    return int(stripped)


def _real_number(text: str, what: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{what} must be a number, got {storable.shown(text)}") from None


def name(text: str) -> str:
    """A name or key: a run id, a function, a signal, a queue, an idempotency key."""
    return _refusing(lambda: storable.name(text, what="the name"))


def name_list(text: str) -> list[str]:
    names = [name(part.strip()) for part in text.split(",") if part.strip()]
    if not names:
        raise argparse.ArgumentTypeError("give at least one name")
    return names


def integer_between(minimum: int, maximum: int, what: str) -> Callable[[str], int]:
    """An argument type taking an integer from ``minimum`` to ``maximum``."""

    def parse(text: str) -> int:
        number = _whole_number(text, what)
        return _refusing(lambda: storable.integer(number, what=what, minimum=minimum, maximum=maximum))

    return parse


occurrence = integer_between(0, storable.PG_INTEGER_MAX, "the occurrence")
priority = integer_between(MIN_PRIORITY, MAX_PRIORITY, "the priority")
positive_int = integer_between(1, storable.PG_INTEGER_MAX, "a count")
non_negative_int = integer_between(0, storable.PG_INTEGER_MAX, "a count")
concurrency = integer_between(1, MAX_CONCURRENCY, "the concurrency")
port = integer_between(1, 65535, "the port")


def seconds(text: str) -> float:
    """A number of seconds: finite, not negative, at most 100 years (never NaN)."""
    number = _real_number(text, "seconds")
    return _refusing(lambda: storable.seconds(number, what="seconds", allow_none=False))


def duration(text: str) -> timedelta:
    """'30d', '12h', '90m', '45s' or plain seconds, at most 100 years."""
    match = _DURATION.match(text)
    if not match:
        raise argparse.ArgumentTypeError(f"invalid duration {storable.shown(text)}: use e.g. 30d, 12h, 90m or 45s")
    amount = float(match.group(1)) * _UNITS[match.group(2)]
    return timedelta(seconds=_refusing(lambda: storable.seconds(amount, what="the duration", allow_none=False)))


def tenant(text: str) -> str:
    try:
        return str(uuid.UUID(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"tenant {storable.shown(text)} is not a UUID") from None


def json_value(text: str) -> Any:
    """JSON text, decoded into a value PostgreSQL's jsonb stores."""
    return _refusing(lambda: storable.json_value(text, what="the JSON"))
