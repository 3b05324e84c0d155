"""Cron arithmetic: parse a schedule's expression and zone, and find its next tick.

A cron expression names wall-clock times in the schedule's zone. Two DST rules
turn those wall times into instants (docs/schedules.md explains them):

- a wall time the clocks skip (spring forward) fires once, shifted forward by
  the gap (02:30 becomes 03:30), never twice when that meets another tick;
- a wall time the clocks repeat (fall back) fires once, at its first pass,
  unless the schedule fires in every hour of the day: then it keeps its
  real-time rhythm and fires in both passes, so ``*/15 * * * *`` never pauses
  for an hour.

Pure functions, no database: the store keeps ``next_fire_at`` as an instant.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import cast
from zoneinfo import ZoneInfo

from croniter import CroniterBadDateError, CroniterError, croniter

from .. import storable
from ..exceptions import InvalidInput, InvalidSchedule

# Wider than any DST shift a zone has used (double summer time was two hours).
_TRANSITION_WINDOW = timedelta(hours=3)
_HOURS_OF_A_DAY = set(range(24))


@dataclass(frozen=True, slots=True)
class CronSpec:
    """A validated cron expression and zone."""

    expression: str
    zone: ZoneInfo
    # Six fields: the first one is seconds (croniter's default puts it last).
    seconds_first: bool
    # It fires in every hour of the day, so a repeated hour fires in both passes.
    every_hour: bool

    def wall_times(self, start: datetime) -> croniter[datetime]:
        return croniter(self.expression, start, ret_type=datetime, second_at_beginning=self.seconds_first)


def normalize(expression: object) -> str:
    """The expression with single spaces between fields, so an upsert compares like with like.

    Args:
        expression: a cron expression.

    Returns:
        The normalised expression.

    Raises:
        InvalidSchedule: it is not a non-empty string PostgreSQL can store, of at most MAX_NAME_CHARS.
    """
    try:
        normalized = " ".join(storable.name(expression, what="a cron expression").split())
    except InvalidInput as exc:
        raise InvalidSchedule(str(exc), cron=expression) from None
    if not normalized:
        raise InvalidSchedule(f"a cron expression must be a non-empty string, got {expression!r}", cron=expression)
    return normalized


def parse(expression: object, tz: object = "UTC") -> CronSpec:
    """Validate a cron expression and an IANA time zone name.

    Args:
        expression: five fields (minute hour day-of-month month day-of-week), six
            with a leading seconds field, or an alias such as ``@daily``.
        tz: an IANA zone name such as ``"Europe/Berlin"``.

    Returns:
        The parsed specification.

    Raises:
        InvalidSchedule: the expression or the zone is not valid, or the
            expression never matches a date (``0 0 30 2 *``).
    """
    text = normalize(expression)
    fields = text.split(" ")
    if not text.startswith("@") and len(fields) not in (5, 6):
        raise InvalidSchedule(f"invalid cron expression {text!r}: give 5 fields, or 6 with seconds first", cron=text)
    seconds_first = len(fields) == 6
    try:
        parsed = croniter(text, second_at_beginning=seconds_first)
    except (CroniterError, ValueError, KeyError, TypeError) as exc:
        raise InvalidSchedule(f"invalid cron expression {text!r}: {exc}", cron=text) from None
    # The stubs type ``expanded`` as lists of str; croniter expands a field to ints, or to ["*"] for every value.
    hours = cast(list[int | str], parsed.expanded[1])
    spec = CronSpec(
        expression=text,
        zone=zone(tz),
        seconds_first=seconds_first,
        every_hour=hours == ["*"] or set(hours) == _HOURS_OF_A_DAY,
    )
    next_fire_after(spec, datetime.now(UTC))  # an expression that never matches fails here
    return spec


def zone(tz: object) -> ZoneInfo:
    """Look up an IANA zone.

    Args:
        tz: a zone name such as ``"America/New_York"``.

    Returns:
        Its ZoneInfo.

    Raises:
        InvalidSchedule: there is no such zone.
    """
    try:
        return ZoneInfo(storable.zone(tz))
    except InvalidInput as exc:
        raise InvalidSchedule(str(exc), tz=tz) from None


def next_fire_after(spec: CronSpec, after: datetime) -> datetime:
    """The first tick strictly after an instant, by the DST rules of this module.

    Args:
        spec: the parsed schedule.
        after: an aware instant.

    Returns:
        The tick, as an aware UTC datetime.

    Raises:
        InvalidSchedule: the expression matches no date at all.
    """
    if after.tzinfo is None:
        raise ValueError("after must be timezone-aware")
    local = after.astimezone(spec.zone).replace(tzinfo=None)
    start = local
    if spec.every_hour:
        # Near a fall-back, a wall time up to one shift before ``local`` may have its second pass ahead.
        shift = _offset(spec.zone, after - _TRANSITION_WINDOW) - _offset(spec.zone, after + _TRANSITION_WINDOW)
        start = local - max(shift, timedelta(0))
    walls = spec.wall_times(start)
    best: datetime | None = None
    while True:
        try:
            wall = walls.get_next(datetime)
        except CroniterBadDateError:
            raise InvalidSchedule(
                f"cron expression {spec.expression!r} matches no date", cron=spec.expression
            ) from None
        instants = _instants(spec, wall)
        for instant in instants:
            if instant > after and (best is None or instant < best):
                best = instant
        # First passes only grow with the wall time: nothing later can come sooner.
        if instants[0] > after:
            assert best is not None, "instants[0] is after ``after``, so it was a candidate"
            return best


def _offset(zone_info: ZoneInfo, instant: datetime) -> timedelta:
    offset = instant.astimezone(zone_info).utcoffset()
    assert offset is not None, "an instant in a ZoneInfo zone always has an offset"
    return offset


def _instants(spec: CronSpec, wall: datetime) -> list[datetime]:
    """The instants one wall time fires at, first pass first."""
    first = wall.replace(tzinfo=spec.zone, fold=0).astimezone(UTC)
    second = wall.replace(tzinfo=spec.zone, fold=1).astimezone(UTC)
    if second > first and spec.every_hour:
        return [first, second]  # a repeated wall time, on a schedule that keeps its rhythm
    # Ordinary, a repeated wall time's first pass, or a skipped one shifted by the gap (fold=0).
    return [first]
