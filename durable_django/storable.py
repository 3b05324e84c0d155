"""The domain of storable values: what every door lets through to PostgreSQL.

Every door (the client API, ``ctx.*``, registration, the commands, the
admin's forms, the Tasks backend and the settings checks) checks what it is
handed with these functions, so one rule holds everywhere: a value that
PostgreSQL cannot store, or a column cannot hold, is an
:class:`~durable_django.exceptions.InvalidInput` naming what was wrong, raised
before anything is written. No door keeps a copy of a rule; each limit is a
constant here.

- Text: no NUL (PostgreSQL's ``text`` and ``jsonb`` cannot hold it) and no lone
  surrogate (what Python makes of undecodable bytes; UTF-8 cannot encode it).
- Names, keys, queues, step and signal names, schedule ids: at most
  ``MAX_NAME_CHARS`` characters, well inside what a btree index entry holds.
- Integers for ``integer`` columns: within PostgreSQL's ``integer``.
- Floats: finite. Durations: finite, not negative, at most ``MAX_SECONDS``.
- Instants: aware, never before 1970, at most ``MAX_SECONDS`` from now.
- JSON: what ``json`` encodes without NaN or Infinity, no deeper than
  ``MAX_JSON_DEPTH``, at most ``DURABLE["MAX_VALUE_BYTES"]`` bytes of UTF-8.
"""

from __future__ import annotations

import json
import math
import re
import zoneinfo
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from functools import cache
from typing import Literal, overload

from .exceptions import InvalidInput

# The most characters in a name or key: a btree index entry holds about 2.7 kB, and 512 characters of
# four-byte UTF-8 are 2 kB.
MAX_NAME_CHARS = 512

# PostgreSQL's integer column.
PG_INTEGER_MIN = -(2**31)
PG_INTEGER_MAX = 2**31 - 1

# The longest duration accepted, and how far ahead an instant may lie: far beyond any real delay, well
# inside PostgreSQL's and Python's timestamps.
MAX_SECONDS = 100 * 366 * 86400
MAX_AHEAD = timedelta(seconds=MAX_SECONDS)

# The earliest instant accepted.
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

# The deepest JSON nesting accepted: PostgreSQL parses jsonb recursively, and so does Python's decoder
# when the value is read back.
MAX_JSON_DEPTH = 512

# The default of DURABLE["MAX_VALUE_BYTES"], and the most it may be: jsonb holds at most 255 MiB.
DEFAULT_MAX_VALUE_BYTES = 64 * 2**20
JSONB_MAX_BYTES = 2**28 - 1

# The longest text an error message quotes.
_SHOWN_CHARS = 60

# File names in the zoneinfo tree that are not IANA zones: "localtime" differs from host to host.
_NOT_ZONES = frozenset({"localtime", "posixrules"})

# Compact JSON, refusing NaN and infinities, writing characters as themselves (so that a lone surrogate
# stays one and UTF-8 encoding finds it); one encoder for every call.
_ENCODER = json.JSONEncoder(allow_nan=False, ensure_ascii=False, separators=(",", ":"))

# In JSON text a NUL is the escape \u0000 whose backslash is not itself escaped.
_JSON_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")
# A JSON string literal, and the brackets left once those are gone.
_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_SAME_BRACKETS = str.maketrans("{}", "[]")

# A JSON string literal, or a number in exponent notation with a positive exponent (what Python writes for
# floats from 1e16 up); the substitution rewrites only the number.
_STRING_OR_BIG_FLOAT = re.compile(r'("[^"\\]*(?:\\.[^"\\]*)*")|(-?\d+(?:\.\d+)?e\+\d+)')

# What storable_text() replaces.
_UNSTORABLE_CHAR = re.compile("[\x00\ud800-\udfff]")


def shown(value: object) -> str:
    """A value as an error message quotes it: its repr, cut short."""
    text = repr(value)
    return text if len(text) <= _SHOWN_CHARS else f"{text[:_SHOWN_CHARS]}..."


def storable_text(value: str) -> str:
    """The text with every NUL and lone surrogate replaced by U+FFFD: for texts kept whatever they hold (errors)."""
    if value.isascii() and "\x00" not in value:
        return value
    return _UNSTORABLE_CHAR.sub("\ufffd", value)


def unstorable_char(value: str) -> str | None:
    """Why PostgreSQL cannot store this string ("a NUL character", "a lone surrogate"), or None if it can."""
    if "\x00" in value:
        return "a NUL character"
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return "a lone surrogate (an undecodable byte)"
    return None


def text(value: object, *, what: str, max_chars: int | None = None) -> str:
    """A non-empty string that PostgreSQL can store, of at most ``max_chars`` characters.

    Raises:
        InvalidInput: not a string, empty, too long, or holding a NUL or a lone surrogate.
    """
    if not isinstance(value, str) or not value:
        raise InvalidInput(f"{what} must be a non-empty string, got {shown(value)}")
    if max_chars is not None and len(value) > max_chars:
        raise InvalidInput(f"{what} must be at most {max_chars} characters, got {len(value)}")
    problem = unstorable_char(value)
    if problem is not None:
        raise InvalidInput(f"{what} holds {problem}, which PostgreSQL cannot store: {shown(value)}")
    return value


def name(value: object, *, what: str) -> str:
    """A name or key (function, queue, step, signal, schedule id, idempotency or limit key, run id)."""
    return text(value, what=what, max_chars=MAX_NAME_CHARS)


def zone(value: object, *, what: str = "a time zone") -> str:
    """An IANA time zone name such as ``"Europe/Berlin"`` (never ``"localtime"``: it differs per host).

    Raises:
        InvalidInput: not a string, or not an IANA zone this host knows.
    """
    if not isinstance(value, str) or value not in _iana_zones():
        raise InvalidInput(
            f"unknown time zone {shown(value)}: {what} must be an IANA zone name such as 'Europe/Berlin'"
        )
    return value


@cache
def _iana_zones() -> frozenset[str]:
    return frozenset(zoneinfo.available_timezones() - _NOT_ZONES)


def integer(
    value: object, *, what: str, minimum: int | None = PG_INTEGER_MIN, maximum: int | None = PG_INTEGER_MAX
) -> int:
    """A whole number (never a bool) within bounds: by default PostgreSQL's ``integer``.

    Raises:
        InvalidInput: not an int, or outside ``[minimum, maximum]``.
    """
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidInput(f"{what} must be an integer, got {shown(value)}")
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        raise InvalidInput(f"{what} must be an integer {_bounds(minimum, maximum)}, got {shown(value)}")
    return value


def count(value: object, *, what: str) -> int:
    """A count or a limit: an integer from 1 to PostgreSQL's largest ``integer``."""
    return integer(value, what=what, minimum=1)


def number(
    value: object,
    *,
    what: str,
    minimum: float | None = None,
    maximum: float | None = None,
    above: float | None = None,
) -> float:
    """A finite real number (never a bool) within ``[minimum, maximum]`` and greater than ``above``.

    Raises:
        InvalidInput: not a number, NaN, infinite, or out of bounds.
    """
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise InvalidInput(f"{what} must be a number, got {shown(value)}")
    try:
        result = float(value)
    except OverflowError:
        raise InvalidInput(f"{what} is too large, got {shown(value)}") from None
    if not math.isfinite(result):
        raise InvalidInput(f"{what} must be a finite number, got {shown(value)}")
    if (
        (minimum is not None and result < minimum)
        or (maximum is not None and result > maximum)
        or (above is not None and result <= above)
    ):
        bounds = _bounds(minimum, maximum) if above is None else f"> {above}"
        raise InvalidInput(f"{what} must be a number {bounds}, got {shown(value)}")
    return result


def _bounds(minimum: float | None, maximum: float | None) -> str:
    if minimum is not None and maximum is not None:
        return f"between {minimum} and {maximum}"
    return f">= {minimum}" if minimum is not None else f"<= {maximum}"


@overload
def seconds(value: object, *, what: str, allow_none: Literal[False], positive: bool = False) -> float: ...
@overload
def seconds(value: object, *, what: str, allow_none: bool = True, positive: bool = False) -> float | None: ...
def seconds(value: object, *, what: str, allow_none: bool = True, positive: bool = False) -> float | None:
    """A duration as seconds: a timedelta, or a plain number taken as seconds.

    Raises:
        InvalidInput: negative (or zero, when ``positive``), not finite, longer than MAX_SECONDS, or not a
        duration.
    """
    if value is None:
        if allow_none:
            return None
        raise InvalidInput(f"{what} is required")
    if isinstance(value, timedelta):
        value = value.total_seconds()
    elif not isinstance(value, (int, float)) or isinstance(value, bool):
        raise InvalidInput(f"{what} must be a timedelta or a number of seconds, got {shown(value)}")
    result = number(value, what=what)
    if result < 0 or (positive and result == 0):
        raise InvalidInput(f"{what} must be {'positive' if positive else 'not negative'}, got {shown(value)}")
    if result > MAX_SECONDS:
        raise InvalidInput(f"{what} must be at most 100 years, got {shown(value)}")
    return result


def instant(value: object, *, what: str, now: datetime | None = None) -> datetime | None:
    """An aware datetime from 1970 to 100 years after ``now`` (the present by default), or None.

    Raises:
        InvalidInput: not a datetime, naive (its instant would be ambiguous), or out of that range.
    """
    if value is None:
        return None
    if not isinstance(value, datetime):
        raise InvalidInput(f"{what} must be a datetime, got {shown(value)}")
    try:
        offset = value.utcoffset()
        if offset is None:
            raise InvalidInput(f"{what} must be timezone-aware (a naive datetime is ambiguous)")
        latest = (now or datetime.now(UTC)) + MAX_AHEAD
        in_range = EPOCH <= value <= latest
    except (OverflowError, ValueError, TypeError) as exc:  # an offset that pushes it past year 1 or 9999
        raise InvalidInput(f"{what} is not a storable instant: {exc}") from None
    if not in_range:
        raise InvalidInput(f"{what} must lie between 1970 and 100 years from now, got {value.isoformat()}")
    return value


def json_text(value: object, *, what: str) -> str:
    """Encode a value that must survive a JSON round trip and fit PostgreSQL's jsonb.

    Args:
        value: any JSON-serialisable value (None becomes JSON null).
        what: how the error message names the value.

    Returns:
        Compact JSON text.

    Raises:
        InvalidInput: not JSON-serialisable, NaN or infinite, deeper than MAX_JSON_DEPTH, larger than
        DURABLE["MAX_VALUE_BYTES"], or holding a NUL or a lone surrogate in a string or key.
    """
    # Scalars, as the encoder writes them, without its set-up: a step run for its effect returns None.
    if value is None:
        return "null"
    if type(value) is bool:
        return "true" if value else "false"
    try:
        if type(value) is int:
            encoded = int.__repr__(value)  # ValueError past Python's limit on an int's digits, as encoding gives
        else:
            encoded = _ENCODER.encode(value)
    except RecursionError:
        raise InvalidInput(f"{what} is nested deeper than {MAX_JSON_DEPTH} levels") from None
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"{what} is not JSON-serialisable: {exc}") from exc
    if "e+" in encoded:
        encoded = _positional_floats(encoded)
    if has_nul(encoded):
        raise InvalidInput(f"{what} holds a NUL character (\\u0000), which PostgreSQL cannot store") from None
    try:
        size = json_bytes(encoded)
    except UnicodeEncodeError:
        problem = "a lone surrogate (an undecodable byte)"
        raise InvalidInput(f"{what} holds {problem}, which PostgreSQL cannot store") from None
    limit = max_value_bytes()
    if size > limit:
        raise InvalidInput(f"{what} is {size} bytes of JSON, more than DURABLE['MAX_VALUE_BYTES'] ({limit})")
    if too_deep(encoded):
        raise InvalidInput(f"{what} is nested deeper than {MAX_JSON_DEPTH} levels")
    return encoded


def _positional_floats(json_encoded: str) -> str:
    """Floats from 1e16 up written as ``93596800246350140.0``, not ``9.359680024635014e+16``.

    jsonb keeps a number as a decimal with the scale it was written with: a
    float in exponent notation has scale 0, so it would read back as an int
    (and not the same number). Written with a fraction, it reads back as the float.
    """

    def positional(match: re.Match[str]) -> str:
        number = match.group(2)
        return match.group(1) if number is None else f"{Decimal(number):f}.0"

    return _STRING_OR_BIG_FLOAT.sub(positional, json_encoded)


def json_bytes(json_encoded: str) -> int:
    """How many bytes this JSON text takes in UTF-8 (UnicodeEncodeError for a lone surrogate)."""
    return len(json_encoded) if json_encoded.isascii() else len(json_encoded.encode("utf-8"))


def has_nul(json_encoded: str) -> bool:
    """Does this JSON text hold a NUL character?"""
    return "\\u0000" in json_encoded and _JSON_NUL.search(json_encoded) is not None


def too_deep(json_source: str) -> bool:
    """Whether JSON text nests arrays and objects deeper than MAX_JSON_DEPTH, found without recursion.

    Each pass drops every innermost pair of brackets (C-speed string work), so a
    value of depth d empties in d passes.
    """
    if "[" not in json_source and "{" not in json_source:
        return False
    without_strings = _JSON_STRING.sub("", json_source) if '"' in json_source else json_source
    brackets = _NOT_BRACKET.sub("", without_strings).translate(_SAME_BRACKETS)
    for _ in range(MAX_JSON_DEPTH):
        inner_dropped = brackets.replace("[]", "")
        if not inner_dropped or len(inner_dropped) == len(brackets):  # empty, or not JSON (the decoder says so)
            return False
        brackets = inner_dropped
    return True


def json_value(text_: object, *, what: str) -> object:
    """Decode JSON text a caller typed (a form field, a command argument) into a storable value.

    Raises:
        InvalidInput: not JSON, or a value json_text() refuses.
    """
    if not isinstance(text_, str):
        raise InvalidInput(f"{what} must be JSON text, got {shown(text_)}")
    problem = unstorable_char(text_)
    if problem is not None:
        raise InvalidInput(f"{what} holds {problem}, which PostgreSQL cannot store") from None
    if too_deep(text_):
        raise InvalidInput(f"{what} is nested deeper than {MAX_JSON_DEPTH} levels")
    try:
        value = json.loads(text_)
    except (ValueError, RecursionError) as exc:  # ValueError: not JSON, or an int past Python's digit limit
        raise InvalidInput(f"{what} is not valid JSON: {exc}") from None
    json_text(value, what=what)
    return value


def max_value_bytes() -> int:
    """DURABLE["MAX_VALUE_BYTES"]: the most bytes one JSON value may take."""
    from .conf import durable_settings

    configured = durable_settings.MAX_VALUE_BYTES
    if isinstance(configured, int) and not isinstance(configured, bool) and 1 <= configured <= JSONB_MAX_BYTES:
        return configured
    return DEFAULT_MAX_VALUE_BYTES  # the settings check reports a bad value; the doors keep the default
