"""Argument types shared by the durable management commands; each raises ArgumentTypeError."""

from __future__ import annotations

import argparse
import json
import re
import uuid
from datetime import timedelta
from typing import Any

from ..values import MAX_SECONDS

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$")
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def duration(text: str) -> timedelta:
    """'30d', '12h', '90m', '45s' or plain seconds, at most MAX_SECONDS."""
    match = _DURATION.match(text)
    if not match:
        raise argparse.ArgumentTypeError(f"invalid duration {text!r}: use e.g. 30d, 12h, 90m or 45s")
    amount = float(match.group(1)) * _UNITS[match.group(2)]
    if amount > MAX_SECONDS:
        raise argparse.ArgumentTypeError(f"duration {text!r} is too long: at most 100 years")
    return timedelta(seconds=amount)


def _integer(text: str, *, what: str = "an integer") -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None


def positive_int(text: str) -> int:
    value = _integer(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return value


def non_negative_int(text: str) -> int:
    value = _integer(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must not be negative")
    return value


def port(text: str) -> int:
    """A TCP port number, 1 to 65535."""
    value = _integer(text, what="a port number")
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"port {text!r} must be between 1 and 65535")
    return value


def non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must not be negative")
    return value


def tenant(text: str) -> str:
    try:
        return str(uuid.UUID(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"tenant {text!r} is not a UUID") from None


def name_list(text: str) -> list[str]:
    names = [part.strip() for part in text.split(",") if part.strip()]
    if not names:
        raise argparse.ArgumentTypeError("give at least one name")
    return names


def json_value(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"invalid JSON: {exc}") from None
