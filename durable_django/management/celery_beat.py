"""django-celery-beat's periodic tasks as schedules: what ``durable_import_celery_beat`` reads and makes.

Celery's tables are only ever read (through its own models, looked up by name, so
this package does not depend on it). A crontab task keeps its fields and zone; an
interval task becomes the cron that fires at the same rhythm, when there is one
(every 5 minutes is ``*/5 * * * *``; every 7 minutes has none, and is skipped with
that reason). Celery's ``args`` and ``kwargs`` become the run's input: the kwargs
alone when there are no args, else ``{"args": [...], "kwargs": {...}}``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from django.apps import apps

# Schedules made from Celery's tasks are named after them, under this prefix.
ID_PREFIX = "celery:"
# Interval periods, in seconds, that divide the next unit evenly: (unit seconds, cron template).
_INTERVAL_CRONS = {
    "seconds": (60, "*/{n} * * * * *"),
    "minutes": (60, "*/{n} * * * *"),
    "hours": (24, "0 */{n} * * *"),
}


@dataclass(frozen=True, slots=True)
class Planned:
    """One Celery periodic task, and the schedule it maps to (or why it maps to none)."""

    task_name: str
    schedule_id: str
    function: str | None = None
    cron: str | None = None
    tz: str = "UTC"
    input: Any = None
    enabled: bool = True
    skipped: str | None = None


# Annotated str, not a literal: the type checker's Django plugin would resolve a literal model reference
# against the settings it type-checks with, which need not install django-celery-beat.
CELERY_BEAT_APP: str = "django_celery_beat"


def celery_beat_installed() -> bool:
    return apps.is_installed(CELERY_BEAT_APP)


def plan(mapping: dict[str, str], known: set[str]) -> list[Planned]:
    """Every periodic task, by name, mapped to a schedule; ``mapping`` renames Celery tasks to functions.

    Args:
        mapping: Celery task path -> durable function name (a task not in it keeps its own name).
        known: the durable function names registered in this process.
    """
    periodic_task: Any = apps.get_model(CELERY_BEAT_APP, "PeriodicTask")
    planned = []
    for task in periodic_task.objects.select_related("crontab", "interval").order_by("name"):
        planned.append(_plan_one(task, mapping, known))
    return planned


def _plan_one(task: Any, mapping: dict[str, str], known: set[str]) -> Planned:
    base = {"task_name": task.name, "schedule_id": f"{ID_PREFIX}{task.name}"}
    function = mapping.get(task.task, task.task)
    if task.one_off:
        return Planned(**base, skipped="a one-off task: enqueue it instead")
    cron: str | None
    if task.crontab is not None:
        crontab = task.crontab
        cron = " ".join(
            str(field)
            for field in (
                crontab.minute, crontab.hour, crontab.day_of_month, crontab.month_of_year, crontab.day_of_week,
            )
        )  # fmt: skip
        tz = str(crontab.timezone) if crontab.timezone else "UTC"
    elif task.interval is not None:
        cron, why = _interval_cron(int(task.interval.every), str(task.interval.period))
        if cron is None:
            return Planned(**base, skipped=why)
        tz = "UTC"
    else:
        return Planned(**base, skipped="neither crontab nor interval (solar and clocked tasks are not imported)")
    if function not in known:
        return Planned(
            **base, cron=cron, tz=tz,
            skipped=f"no durable function {function!r} is registered (map it with --map {task.task}=FUNCTION)",
        )  # fmt: skip
    return Planned(
        **base, function=function, cron=cron, tz=tz, input=_input(task.args, task.kwargs), enabled=task.enabled
    )


def _interval_cron(every: int, period: str) -> tuple[str | None, str]:
    if period == "days" and every == 1:
        return "0 0 * * *", ""
    if period in _INTERVAL_CRONS:
        unit, template = _INTERVAL_CRONS[period]
        if 0 < every <= unit and unit % every == 0:
            return template.format(n=every) if every > 1 else template.replace("*/{n}", "*"), ""
    return None, f"an interval of every {every} {period} has no cron that fires at the same rhythm"


def _input(args: str | None, kwargs: str | None) -> Any:
    positional = json.loads(args or "[]")
    named = json.loads(kwargs or "{}")
    if not positional:
        return named or None
    return {"args": positional, "kwargs": named}
