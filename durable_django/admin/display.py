"""How the admin shows runs: durations, moments, statuses, links, waits, and values cut to size.

Large values are cut by PostgreSQL before they are read (``json_excerpt``,
``error_excerpt``), so a run's page stays under a fixed size whatever it holds.
"""

from __future__ import annotations

import os
import re
import sys
from datetime import UTC, datetime, timedelta

from django.contrib.admin.utils import quote
from django.db.models import Func, TextField
from django.db.models.functions import Left, Length, Right
from django.urls import reverse
from django.utils import timezone
from django.utils.formats import date_format
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from ..journal_ids import WaitingFor
from ..models import Run
from ..states import LIVE_STATUSES, RunStatus

# Input and output are cut at this many characters of their indented JSON.
MAX_JSON_CHARS = 20_000
# A step's result or a signal's value, in its table row.
MAX_CELL_CHARS = 1_000
# An error keeps its beginning and its end (the exception and its message).
ERROR_HEAD_CHARS = ERROR_TAIL_CHARS = 10_000
# Names and keys callers choose, shown whole up to this length.
MAX_NAME_CHARS = 200


class JSONBPretty(Func):
    """PostgreSQL's ``jsonb_pretty()``: a jsonb value as indented text."""

    function = "jsonb_pretty"
    output_field = TextField()


def json_excerpt(field: str, limit: int, name: str | None = None) -> dict[str, Func]:
    """Annotations of a jsonb column: ``{name}_text``, its indented text cut at ``limit``, and ``{name}_chars``.

    Fed to :func:`cut_text`; the text is None for SQL NULL. ``name`` defaults to the column's.
    """
    pretty = JSONBPretty(field)
    name = name or field
    return {f"{name}_text": Left(pretty, limit), f"{name}_chars": Length(pretty)}


def cut_text(text: str | None, chars: int | None) -> str | None:
    """A value read cut by PostgreSQL, with what was cut announced (``chars`` is None only with ``text``)."""
    if text is None or chars is None or chars <= len(text):
        return text
    cut = _("… cut here: %(count)s more characters (the record keeps all of them)") % {
        "count": f"{chars - len(text):,}"
    }
    return f"{text}\n{cut}"


def error_excerpt() -> dict[str, Func]:
    """Annotations of a run's error: its beginning, its end and its length."""
    return {
        "error_head": Left("error", ERROR_HEAD_CHARS),
        "error_tail": Right("error", ERROR_TAIL_CHARS),
        "error_chars": Length("error"),
    }


def cut_error(head: str | None, tail: str | None, chars: int | None) -> str | None:
    """An error from its beginning and end: whole when they overlap, else with the middle cut.

    The three are one column's excerpts, so they are None together (no error).
    """
    if head is None or tail is None or chars is None:
        return None
    missing = chars - len(head) - len(tail)
    if missing <= 0:
        return head + tail[-missing:]
    cut = _("… %(count)s characters cut here …") % {"count": f"{missing:,}"}
    return f"{head}\n\n{cut}\n\n{tail}"


def shorten(text: str) -> str:
    """A caller-chosen name or key, cut for display at MAX_NAME_CHARS."""
    return text if len(text) <= MAX_NAME_CHARS else f"{text[:MAX_NAME_CHARS]}…"


def readable_traceback(text: str) -> str:
    """A stored traceback with each file shown relative to the import path it was loaded from.

    ``.../site-packages/durable_django/engine/execute.py`` reads as
    ``durable_django/engine/execute.py``: the module is what an operator looks
    for. Paths outside this process's import path are left whole.
    """
    roots = sorted({os.path.join(os.path.abspath(entry or os.curdir), "") for entry in sys.path}, key=len, reverse=True)
    roots = [root for root in roots if len(root) > 1]

    def relative(match: re.Match[str]) -> str:
        path = match.group(1)
        root = next((root for root in roots if path.startswith(root)), None)
        return f'File "{path[len(root) :]}"' if root else match.group(0)

    return re.sub(r'File "([^"]+)"', relative, text)


def compact_duration(delta: timedelta) -> str:
    """A short human duration: 45s, 3m 20s, 5h 2m, 12d 4h."""
    total = int(abs(delta.total_seconds()))
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return _("%(days)sd %(hours)sh") % {"days": days, "hours": hours}
    if hours:
        return _("%(hours)sh %(minutes)sm") % {"hours": hours, "minutes": minutes}
    if minutes:
        return _("%(minutes)sm %(seconds)ss") % {"minutes": minutes, "seconds": secs}
    return _("%(seconds)ss") % {"seconds": secs}


def moment(when: datetime) -> str:
    """A datetime in the admin's zone, to the second: operators compare moments closely.

    An instant so near year 1 or 9999 that the zone's offset takes it out of Python's range is shown in
    UTC (and says so): a page shows whatever the table holds.
    """
    try:
        return date_format(timezone.localtime(when), "Y-m-d H:i:s")
    except OverflowError:
        return date_format(when.astimezone(UTC), "Y-m-d H:i:s") + " UTC"


# A run's status and an attempt's outcome as the admin writes them in lower case, translated; a stored value
# outside these is shown as it is.
_WORDS = {
    "pending": gettext_lazy("pending"),
    "running": gettext_lazy("running"),
    "waiting": gettext_lazy("waiting"),
    "succeeded": gettext_lazy("succeeded"),
    "failed": gettext_lazy("failed"),
    "cancelled": gettext_lazy("cancelled"),
    "retrying": gettext_lazy("retrying"),
    "suspended": gettext_lazy("suspended"),
    "released": gettext_lazy("released"),
    "lost": gettext_lazy("lost"),
    "timed_out": gettext_lazy("timed_out"),
}


def outcome_word(value: str) -> str:
    """A run's status or an attempt's outcome in the reader's language (lower case, as listings show it)."""
    word = _WORDS.get(value)
    return value if word is None else str(word)


def status_badge(status: str) -> SafeString:
    label = RunStatus(status).label if status in RunStatus.values else status
    return format_html('<span class="durable-status durable-status-{}">{}</span>', status, label)


def run_url(run_id: str) -> str:
    return reverse("admin:durable_django_run_change", args=[quote(run_id)])


def run_link(run_id: str, text: str | None = None) -> SafeString:
    return format_html('<a href="{}" class="durable-run-id">{}</a>', run_url(run_id), text or run_id)


def describe_deadline(run: Run) -> str | None:
    """A run's deadline as an operator reads it: how soon, or how long ago (None when it has none)."""
    if run.deadline is None:
        return None
    left = run.deadline - timezone.now()
    if run.status not in LIVE_STATUSES:
        return moment(run.deadline)
    if left.total_seconds() >= 0:
        return format_html(
            '<span title="{}">{}</span>',
            moment(run.deadline),
            _("in %(duration)s") % {"duration": compact_duration(left)},
        )
    return format_html(
        '<span class="durable-expired" title="{}">{}</span>',
        moment(run.deadline),
        _("passed %(duration)s ago") % {"duration": compact_duration(left)},
    )


def describe_wait(run: Run) -> str | None:
    """What a run is waiting for, as an operator reads it (None when it waits for nothing)."""
    until = run.available_at
    if run.status == RunStatus.WAITING and run.waiting_for:
        try:
            waiting_for = WaitingFor.parse(run.waiting_for)
        except ValueError:
            return run.waiting_for
        if waiting_for.kind == WaitingFor.SLEEP:
            return format_html(_("sleep until {}"), moment(until)) if until else _("sleep")
        if waiting_for.kind == WaitingFor.OPERATOR:
            return _("an operator: parked, its retries ran out (resume or cancel it)")
        if waiting_for.kind == WaitingFor.SIGNAL:
            name = shorten(waiting_for.target)
            text = (
                format_html(_("signal “{}”"), name)
                if waiting_for.occurrence == 0
                else format_html(_("signal “{}” #{}"), name, waiting_for.occurrence)
            )
            return format_html(_("{} (timeout {})"), text, moment(until)) if until else text
        if waiting_for.kind == WaitingFor.CHILDREN:
            if waiting_for.target == WaitingFor.ALL:
                text = format_html(_("all its awaited children ({} to land)"), run.awaiting_children)
            else:
                text = format_html("{}", _("the first of its awaited children to land"))
            return format_html(_("{} (timeout {})"), text, moment(until)) if until else text
        child = waiting_for.target
        return format_html(_("child {}"), run_link(child, child[:8] + "…"))
    if run.status == RunStatus.PENDING and until and until > timezone.now():
        return format_html(_("not before {}"), moment(until))
    if run.status == RunStatus.RUNNING and run.attempt_started_at is None:
        return _("claimed, waiting for a slot")
    if run.status == RunStatus.RUNNING and run.cancel_requested_at and not run.pivoted_at:
        return _("cancel requested")
    return None
