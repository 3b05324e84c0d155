"""Validation of the values callers hand in: JSON, text, whole numbers, durations and instants.

Every layer checks what crosses it with these, so one rule holds everywhere:
a bad value is an :class:`~durable_django.exceptions.InvalidInput` naming
what was wrong, raised before anything is written. PostgreSQL cannot store
the NUL character in ``text`` or ``jsonb``, so no text or JSON holding one
gets past here.
"""

from __future__ import annotations

import json
import math
import re
from datetime import datetime, timedelta
from typing import Literal, overload

from .exceptions import InvalidInput

# The longest duration accepted: far beyond any real delay, well inside PostgreSQL's timestamps.
MAX_SECONDS = 100 * 366 * 86400

# Compact JSON, refusing NaN and infinities; one encoder for every call (json.dumps would build one per
# call for these options).
_ENCODER = json.JSONEncoder(allow_nan=False, separators=(",", ":"))

# In JSON text a NUL is the escape \u0000 whose backslash is not itself escaped.
_JSON_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


def json_text(value: object, *, what: str) -> str:
    """Encode a value that must survive a JSON round trip and fit PostgreSQL's jsonb.

    Args:
        value: any JSON-serialisable value (None becomes JSON null).
        what: how the error message names the value.

    Returns:
        Compact JSON text.

    Raises:
        InvalidInput: not JSON-serialisable, NaN or infinite, or holding a NUL character.
    """
    try:
        # Scalars that hold no NUL, as the encoder writes them, without its set-up: a step run for its
        # effect returns None.
        if value is None:
            return "null"
        if type(value) is bool:
            return "true" if value else "false"
        if type(value) is int:
            return int.__repr__(value)  # ValueError past Python's limit on an int's digits, as encoding gives
        text = _ENCODER.encode(value)
    except (TypeError, ValueError, RecursionError) as exc:
        raise InvalidInput(f"{what} is not JSON-serialisable: {exc}") from exc
    if has_nul(text):
        raise InvalidInput(f"{what} holds a NUL character (\\u0000), which PostgreSQL cannot store")
    return text


def has_nul(json_encoded: str) -> bool:
    """Does this JSON text hold a NUL character?"""
    return "\\u0000" in json_encoded and _JSON_NUL.search(json_encoded) is not None


def text(value: object, *, what: str) -> str:
    """A non-empty string that PostgreSQL can store.

    Raises:
        InvalidInput: not a string, empty, or holding a NUL character.
    """
    if not isinstance(value, str) or not value:
        raise InvalidInput(f"{what} must be a non-empty string, got {value!r}")
    if "\x00" in value:
        raise InvalidInput(f"{what} holds a NUL character, which PostgreSQL cannot store: {value!r}")
    return value


def integer(value: object, *, what: str, minimum: int | None = None, maximum: int | None = None) -> int:
    """A whole number (never a bool) within bounds.

    Raises:
        InvalidInput: not an int, or outside ``[minimum, maximum]``.
    """
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidInput(f"{what} must be an integer, got {value!r}")
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        bounds = (
            f"between {minimum} and {maximum}"
            if minimum is not None and maximum is not None
            else f">= {minimum}"
            if minimum is not None
            else f"<= {maximum}"
        )
        raise InvalidInput(f"{what} must be an integer {bounds}, got {value!r}")
    return value


@overload
def seconds(value: object, *, what: str, allow_none: Literal[False]) -> float: ...
@overload
def seconds(value: object, *, what: str, allow_none: bool = True) -> float | None: ...
def seconds(value: object, *, what: str, allow_none: bool = True) -> float | None:
    """A duration as seconds: a timedelta, or a plain number taken as seconds.

    Raises:
        InvalidInput: negative, not finite, longer than MAX_SECONDS, or not a duration.
    """
    if value is None:
        if allow_none:
            return None
        raise InvalidInput(f"{what} is required")
    if isinstance(value, timedelta):
        result = value.total_seconds()
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            result = float(value)
        except OverflowError:
            raise InvalidInput(f"{what} is too large, got {value!r}") from None
    else:
        raise InvalidInput(f"{what} must be a timedelta or a number of seconds, got {value!r}")
    if not math.isfinite(result):
        raise InvalidInput(f"{what} must be a finite duration, got {value!r}")
    if result < 0:
        raise InvalidInput(f"{what} must not be negative, got {value!r}")
    if result > MAX_SECONDS:
        raise InvalidInput(f"{what} must be at most 100 years, got {value!r}")
    return result


def aware(value: object, *, what: str) -> datetime | None:
    """An aware datetime, or None.

    Raises:
        InvalidInput: not a datetime, or naive (its instant would be ambiguous).
    """
    if value is None:
        return None
    if not isinstance(value, datetime):
        raise InvalidInput(f"{what} must be a datetime, got {value!r}")
    if value.tzinfo is None or value.tzinfo.utcoffset(value) is None:
        raise InvalidInput(f"{what} must be timezone-aware (a naive datetime is ambiguous)")
    return value
