"""A schedule's address in the admin's URLs: its own id, without the stored tenant prefix where it can.

Schedules are stored under ``{tenant_id}:{id}``, an untagged one under ``:{id}``.
An untagged schedule's pages are addressed by its own id (``/schedule/hourly-greet/change/``);
a tenant's schedule keeps its stored id, since its tenant is part of which schedule it is.
Stored tenant prefixes are UUIDs, so the two never collide: an address that starts with a
tenant's UUID and a colon, or with a colon, is a stored id (the older links, which carried
``:hourly-greet``, still resolve, and the change page redirects them to the short address);
any other address is an untagged schedule's own id. An untagged id that itself starts with a
colon, or with a UUID and a colon, keeps its stored address.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.contrib.admin.utils import quote
from django.contrib.admin.views.main import ChangeList
from django.http import HttpRequest, HttpResponseRedirect
from django.urls import reverse

from ..models import Schedule


def _is_stored(address: str) -> bool:
    """Whether an address is a stored id: a colon first, or a tenant's UUID and a colon."""
    prefix, colon, _ = address.partition(":")
    if not colon:
        return False
    if not prefix:
        return True
    try:
        uuid.UUID(prefix)
    except ValueError:
        return False
    return True


def address(stored_id: str) -> str:
    """The address of the schedule stored under ``stored_id``, as its pages' URLs carry it (unquoted)."""
    if stored_id.startswith(":") and not _is_stored(own := stored_id[1:]):
        return own
    return stored_id


def stored_id(schedule_address: str) -> str:
    """The stored id an address names (the inverse of :func:`address`, and old stored-id links too)."""
    return schedule_address if _is_stored(schedule_address) else f":{schedule_address}"


def schedule_url(schedule: Schedule, view: str = "change") -> str:
    """The URL of one of a schedule's pages (change, fire, backfill, history, delete), by its address."""
    return reverse(f"admin:durable_django_schedule_{view}", args=[quote(address(schedule.schedule_id))])


def redirect_to_address(request: HttpRequest, requested: str) -> HttpResponseRedirect | None:
    """A GET of a schedule's change page by an address that is not its own (an old stored-id link), sent on."""
    short = address(stored_id(requested))
    if request.method != "GET" or short == requested:
        return None
    here = reverse("admin:durable_django_schedule_change", args=[quote(short)])
    return HttpResponseRedirect(f"{here}?{request.GET.urlencode()}" if request.GET else here)


class ScheduleChangeList(ChangeList):
    """The schedules listing links each schedule by its address."""

    def url_for_result(self, result: Any) -> str:
        return schedule_url(result)
