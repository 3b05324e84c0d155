"""What a schedule's page shows besides its form: the cron in words, the next fire times, the last runs,
its policies, and why it paused itself."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from zoneinfo import ZoneInfo, available_timezones

from django.utils import timezone
from django.utils.translation import gettext as _

from ..api import schedules as api_schedules
from ..engine import cron as cron_math
from ..engine.cron_words import describe
from ..exceptions import InvalidSchedule
from ..models import Schedule
from .schedule_operations import schedule_address

# How many upcoming fire times, and how many past runs, the page lists.
NEXT_FIRES = 5
LAST_RUNS = 10


def zone_choices(current: str | None = None) -> list[tuple[str, str]]:
    """Every IANA zone this Python knows, sorted, UTC first; a stored zone outside the list is kept."""
    zones = sorted(available_timezones() - {"UTC"})
    if current and current not in zones and current != "UTC":
        zones.insert(0, current)
    return [(zone, zone) for zone in ["UTC", *zones]]


def cron_in_words(schedule: Schedule) -> str:
    try:
        cron_math.parse(schedule.cron, "UTC")
    except InvalidSchedule:
        return _("an invalid expression")
    return describe(schedule.cron)


def next_fires(schedule: Schedule, count: int = NEXT_FIRES) -> list[str]:
    """The next ``count`` fire times from the stored next one, as wall-clock times in the schedule's zone.

    A disabled schedule's stored next fire may have passed long ago, and enabling it fires none of the ticks
    it missed: its times are those it would fire from now on, once enabled.
    """
    try:
        spec = cron_math.parse(schedule.cron, schedule.tz or "UTC")
    except InvalidSchedule:
        return []
    first = schedule.next_fire_at if schedule.enabled else cron_math.next_fire_after(spec, timezone.now())
    fires: list[datetime] = [first]
    while len(fires) < count:
        fires.append(cron_math.next_fire_after(spec, fires[-1]))
    return [_in_zone(fire, spec.zone) for fire in fires]


def _in_zone(instant: datetime, zone: ZoneInfo) -> str:
    local = instant.astimezone(zone)
    return f"{local:%Y-%m-%d %H:%M:%S} {local.tzname()}"


@dataclass(frozen=True, slots=True)
class LastRun:
    run_id: str
    tick: str
    status: str


def last_runs(schedule: Schedule, count: int = LAST_RUNS) -> list[LastRun]:
    """The schedule's last runs, newest first, with their status now and their tick in its zone."""
    schedule_id, tenant_id = schedule_address(schedule)
    try:
        zone = cron_math.zone(schedule.tz or "UTC")
    except InvalidSchedule:
        zone = ZoneInfo("UTC")
    return [
        LastRun(record.run_id, _in_zone(record.tick, zone) if record.tick else _("fired by hand"), record.status)
        for record in api_schedules.schedule_runs(schedule_id, limit=count, tenant_id=tenant_id)
    ]


def page_context(schedule: Schedule) -> dict[str, object]:
    """The template context of a schedule's page beyond its form."""
    return {
        "cron_words": cron_in_words(schedule),
        "next_fires": next_fires(schedule),
        "last_runs": last_runs(schedule),
        "overlap": schedule.overlap,
        "paused_reason": schedule.paused_reason,
    }
