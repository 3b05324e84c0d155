"""The runs listing's columns, laid out for a laptop: what an operator reads first, each cell short.

A run id is shown by its first characters (the whole id on hover and in the
link); the time shown is the one that matters for the run's status; claims and
failures are counted apart, because a resume after a sleep, a signal or a child
is a claim that failed nothing.
"""

from __future__ import annotations

from django.contrib import admin
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, ngettext

from ..models import Run
from ..states import RunStatus
from .display import compact_duration, moment

# Columns never read whole: a run's page reads them cut by PostgreSQL (see run_page).
LARGE_COLUMNS = ("input", "output", "error", "progress")
# Columns the listing never shows: left unread for its rows.
HEAVY_COLUMNS = (*LARGE_COLUMNS, "retry_policy")
# A run id is shown by this many characters: enough to tell the runs of a page apart.
SHORT_ID_CHARS = 8


@admin.display(description=gettext_lazy("run"))
def short_id(run: Run) -> SafeString:
    """The first characters of the run id; the whole id in its title (the link carries it whole)."""
    run_id = run.run_id
    if len(run_id) <= SHORT_ID_CHARS + 1:
        return format_html('<span class="durable-run-id">{}</span>', run_id)
    return format_html('<span class="durable-run-id" title="{}">{}…</span>', run_id, run_id[:SHORT_ID_CHARS])


def claims_and_failures(run: Run, *, short: bool) -> str:
    """How often the run was claimed and how often it failed, apart.

    ``attempts`` counts claims (each resume after a sleep, signal or child is one) and ``failures``
    the failed attempts the retry budget counts; ``recoveries`` the claims that took the run over
    from a worker whose lease ran out.
    """
    claims = run.attempts
    if short:
        parts = [ngettext("%(count)s claim", "%(count)s claims", claims) % {"count": claims}]
    elif claims == 0:
        parts = [_("not claimed yet")]
    else:
        parts = [ngettext("claimed %(count)s time", "claimed %(count)s times", claims) % {"count": claims}]
    if run.failures:
        parts.append(ngettext("failed %(count)s", "failed %(count)s", run.failures) % {"count": run.failures})
    if run.recoveries:
        parts.append(
            ngettext(
                "%(count)s taken over after a lost lease", "%(count)s taken over after a lost lease", run.recoveries
            )
            % {"count": run.recoveries}
        )
    return ", ".join(parts)


@admin.display(description=gettext_lazy("claims"))
def claims(run: Run) -> SafeString:
    return format_html(
        '<span title="{}">{}</span>', claims_and_failures(run, short=False), claims_and_failures(run, short=True)
    )


@admin.display(description=gettext_lazy("when"))
def when(run: Run) -> SafeString:
    """The moment that matters for its status: when it finished, since when it runs, or when it is due."""
    now = timezone.now()
    created = moment(run.created_at)
    if run.finished_at is not None:
        text = _("ended %(duration)s ago") % {"duration": compact_duration(now - run.finished_at)}
        title = _("created %(created)s, ended %(when)s") % {"created": created, "when": moment(run.finished_at)}
    elif run.status == RunStatus.RUNNING and (started := run.attempt_started_at or run.claimed_at):
        text = _("runs %(duration)s") % {"duration": compact_duration(now - started)}
        title = _("created %(created)s, claimed %(when)s") % {"created": created, "when": moment(started)}
    elif run.status == RunStatus.PENDING and run.available_at and run.available_at > now:
        text = _("due in %(duration)s") % {"duration": compact_duration(run.available_at - now)}
        title = _("created %(created)s, due %(when)s") % {"created": created, "when": moment(run.available_at)}
    else:
        text = _("%(duration)s old") % {"duration": compact_duration(now - run.created_at)}
        title = _("created %(created)s") % {"created": created}
    return format_html('<span title="{}">{}</span>', title, text)


@admin.display(description=gettext_lazy("queue / tenant"))
def queue_and_tenant(run: Run) -> SafeString:
    if run.tenant_id is None:
        return format_html("{}", run.queue)
    tenant = str(run.tenant_id)
    return format_html(
        '{}<br><span class="durable-note" title="{}">{}…</span>',
        run.queue,
        _("tenant %(tenant)s") % {"tenant": tenant},
        tenant[:SHORT_ID_CHARS],
    )


def breakable(name: str) -> SafeString:
    """A dotted name that may wrap after its dots (``billing.<wbr>capture``), never inside a word."""
    return format_html_join(SafeString(".<wbr>"), "{}", ((part,) for part in name.split(".")))


def lines(parts: list[str]) -> SafeString:
    """Cell parts one under another (the empty ones left out); an em dash when none is left."""
    shown = [(part,) for part in parts if part and part != "—"]
    if not shown:
        return SafeString("—")
    return format_html_join(SafeString("<br>"), "{}", shown)
