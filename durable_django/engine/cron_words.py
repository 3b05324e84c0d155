"""A cron expression in words, for people reading the admin: "every 5 minutes", "at 09:00 on Mondays".

It reads the expression's own fields (steps, ranges and lists say more than
their expansion) and covers the shapes schedules use; anything else is said
field by field, never wrongly. Validation is ``cron.parse``'s job: give this
a valid expression.
"""

from __future__ import annotations

_ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_DAYS = ["Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
_MONTHS = ["", "January", "February", "March", "April", "May", "June", "July", "August", "September",
           "October", "November", "December"]  # fmt: skip
_DAY_NAMES = {name[:3].lower(): index for index, name in enumerate(_DAYS[:7])}
_MONTH_NAMES = {name[:3].lower(): index for index, name in enumerate(_MONTHS) if name}


def describe(expression: str) -> str:
    """The expression in English words.

    Args:
        expression: a valid cron expression: five fields, six with seconds first, or an alias.

    Returns:
        A short phrase such as ``"every 15 minutes, Monday to Friday"``.
    """
    text = " ".join(expression.split())
    text = _ALIASES.get(text.lower(), text)
    fields = text.split(" ")
    seconds = fields.pop(0) if len(fields) == 6 else "0"
    if len(fields) != 5:
        return text
    minute, hour, day, month, weekday = fields
    when, days, months = _time(seconds, minute, hour), _days(day, weekday), _months(month)
    if when.startswith("at ") and not days:
        days = "every day"
    return " ".join(part for part in (when, days, months) if part)


def _number(value: str, names: dict[str, int] | None = None) -> int | None:
    if value.isdigit():
        return int(value)
    return names.get(value.lower()) if names else None


def _step(field: str) -> int | None:
    """N for ``*/N``, else None."""
    if field.startswith("*/") and field[2:].isdigit():
        return int(field[2:])
    return None


def _plural(count: int, unit: str) -> str:
    return f"every {unit}" if count == 1 else f"every {count} {unit}s"


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def _clock(hour: int, minute: int, second: int = 0) -> str:
    return f"{hour:02d}:{minute:02d}" + (f":{second:02d}" if second else "")


def _time(seconds: str, minute: str, hour: str) -> str:
    sec = _number(seconds)
    if sec is None:
        every = _step(seconds)
        if seconds == "*" and minute == "*" and hour == "*":
            return "every second"
        if every is not None and minute == "*" and hour == "*":
            return _plural(every, "second")
        return f"at seconds {seconds}, {_time('0', minute, hour)}"
    minutes = [_number(item) for item in minute.split(",")]
    hours = [_number(item) for item in hour.split(",")]
    if None not in minutes and None not in hours:  # fixed times of day
        times = [_clock(h, m, sec) for h in sorted(hours) for m in sorted(minutes)]  # type: ignore[type-var,arg-type]
        return f"at {_and(times)}" if len(times) <= 6 else f"at minute {minute} of hours {hour}"
    suffix = f" at second {sec}" if sec else ""
    if minute == "*":
        return "every minute" + _hours(hour) + suffix
    if _step(minute) is not None:
        return _plural(_step(minute) or 1, "minute") + _hours(hour) + suffix
    if None not in minutes and hour == "*":
        return "every hour" + ("" if minutes == [0] else f" at minute {_and(minute.split(','))}") + suffix
    if None not in minutes and _step(hour) is not None:
        at = "" if minutes == [0] else f" at minute {_and(minute.split(','))}"
        return _plural(_step(hour) or 1, "hour") + at + suffix
    return f"at minute {minute}{_hours(hour) or ' of every hour'}{suffix}"


def _hours(hour: str) -> str:
    """How a per-minute time is bounded by the hour field (empty for every hour)."""
    if hour == "*":
        return ""
    if "-" in hour and "," not in hour and "/" not in hour:
        low, high = (_number(part) for part in hour.split("-", 1))
        if low is not None and high is not None:
            return f" between {_clock(low, 0)} and {_clock(high, 59)}"
    if _step(hour) is not None:
        return f" in {_plural(_step(hour) or 1, 'hour').removeprefix('every ')}".replace(" in hour", " in every hour")
    return f" in hours {hour}"


def _named(field: str, names: list[str], lookup: dict[str, int], plural: str) -> str | None:
    """A day-of-week or month field as names: "Mondays and Fridays", "Monday to Friday"; None if unreadable."""
    items: list[str] = []
    for item in field.split(","):
        if "-" in item and "/" not in item:
            low, high = (_number(part, lookup) for part in item.split("-", 1))
            if low is None or high is None or high >= len(names) or low >= len(names):
                return None
            items.append(f"{names[low]} to {names[high]}")
            continue
        number = _number(item, lookup)
        if number is None or number >= len(names):
            return None
        items.append(names[number] + plural)
    return _and(items)


def _days(day: str, weekday: str) -> str:
    if day == "*" and weekday == "*":
        return ""
    parts = []
    if day != "*":
        parts.append(f"on day {_and(day.split(','))} of the month")
    if weekday != "*":
        named = _named(weekday, _DAYS, _DAY_NAMES, "s")
        parts.append(f"on {named}" if named and " to " not in named else named or f"on weekdays {weekday}")
    # Cron fires when either the day of the month or the weekday matches, if both are given.
    return " or ".join(parts)


def _months(month: str) -> str:
    if month == "*":
        return ""
    named = _named(month, _MONTHS, _MONTH_NAMES, "")
    return f"in {named}" if named else f"in months {month}"
