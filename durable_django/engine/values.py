"""Validation of caller-supplied values: durations, datetimes, JSON."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

from ..exceptions import InvalidInput


def seconds(value, *, what: str, allow_none: bool = True) -> float | None:
    """A duration as seconds: a timedelta, or a plain number taken as seconds."""
    if value is None:
        if allow_none:
            return None
        raise InvalidInput(f"{what} is required")
    if isinstance(value, timedelta):
        result = value.total_seconds()
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        result = float(value)
    else:
        raise InvalidInput(f"{what} must be a timedelta or a number of seconds, got {value!r}")
    if result < 0 or result != result:
        raise InvalidInput(f"{what} must not be negative, got {value!r}")
    return result


def aware(value, *, what: str) -> datetime | None:
    if value is None:
        return None
    if not isinstance(value, datetime):
        raise InvalidInput(f"{what} must be a datetime, got {value!r}")
    if value.tzinfo is None or value.tzinfo.utcoffset(value) is None:
        raise InvalidInput(f"{what} must be timezone-aware (a naive datetime is ambiguous)")
    return value


def json_text(value, *, what: str) -> str:
    """Encode a value that must survive a JSON round trip unchanged in meaning."""
    try:
        return json.dumps(value, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"{what} is not JSON-serialisable: {exc}") from exc
