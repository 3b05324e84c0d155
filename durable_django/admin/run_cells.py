"""The cells of a run, as the runs listing and a run's page show them: status, function, lease, wait,
limit, deadline, progress, keys, trace, cancellation.

Each is a ``ModelAdmin`` display method (the listing's ``list_display`` and the
page's ``readonly_fields`` name them), gathered in a mixin of ``RunAdmin`` so
the admin itself keeps to what it lists and how; every cell reads the run it is
given, and only ``held_by_limit`` asks the API for more (the limit's counts).
"""

from __future__ import annotations

import json

from django.contrib import admin
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.http import urlencode
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, ngettext

from ..api import operations as api_operations
from ..models import Run
from ..states import RunStatus
from ..tenancy import unscope
from . import run_columns
from .display import compact_duration, describe_deadline, describe_wait, moment, shorten, status_badge
from .filters import HeldByFilter


class RunCells:
    """The display methods of ``RunAdmin``: the listing's cells and the rows of a run's summary."""

    @admin.display(description=gettext_lazy("status"))
    def colored_status(self, run: Run) -> str:
        return status_badge(run.status)

    @admin.display(description=gettext_lazy("function"))
    def function(self, run: Run) -> str:
        return format_html('{} <span class="durable-version">v{}</span>', run_columns.breakable(run.name), run.version)

    @admin.display(description=gettext_lazy("claims and failures"))
    def attempts_display(self, run: Run) -> str:
        return run_columns.claims_and_failures(run, short=False)

    @admin.display(description=gettext_lazy("now"))
    def now(self, run: Run) -> str:
        """What the run does or waits for now: its lease, wait, holding limit, deadline and progress."""
        return run_columns.lines(
            [
                self.lease(run),
                self.waiting(run),
                format_html(_("held by {}"), self.held_by_display(run)) if run.held_by else "",
                format_html(_("deadline {}"), self.deadline_display(run)) if run.deadline else "",
                self.progress_display(run),
            ]
        )

    @admin.display(description=gettext_lazy("progress"))
    def progress_display(self, run: Run) -> str:
        text: str | None = getattr(run, "progress_text", None)
        if text is None:
            return "—"
        cut = "…" if getattr(run, "progress_chars", 0) > len(text) else ""
        return format_html('<span class="durable-progress">{}{}</span>', text, cut)

    @admin.display(description=gettext_lazy("lease"))
    def lease(self, run: Run) -> str:
        if run.status != RunStatus.RUNNING or run.leased_until is None:
            return "—"
        left = run.leased_until - timezone.now()
        holder = _("held by %(worker)s") % {"worker": run.worker_id or _("a worker")}
        if left.total_seconds() >= 0:
            return format_html(
                '<span title="{}">{}</span>', holder, _("%(duration)s left") % {"duration": compact_duration(left)}
            )
        return format_html(
            '<span class="durable-expired" title="{}">{}</span>',
            holder,
            _("expired %(duration)s ago") % {"duration": compact_duration(left)},
        )

    @admin.display(description=gettext_lazy("waiting for"))
    def waiting(self, run: Run) -> str:
        return describe_wait(run) or "—"

    @admin.display(description=gettext_lazy("held by"))
    def held_by_display(self, run: Run) -> str:
        if run.held_by is None:
            return "—"
        return format_html('<a href="{}">{}</a>', held_by_url(run.held_by), shorten(run.held_by))

    @admin.display(description=gettext_lazy("deadline"))
    def deadline_display(self, run: Run) -> str:
        return describe_deadline(run) or "—"

    @admin.display(description=gettext_lazy("tenant"))
    def tenant(self, run: Run) -> str:
        if run.tenant_id is None:
            return "—"
        return format_html('<span title="{}">{}…</span>', run.tenant_id, str(run.tenant_id)[:8])

    # -- rows of a run's summary only --------------------------------------

    @admin.display(description=gettext_lazy("queue / priority"))
    def queue_and_priority(self, run: Run) -> str:
        return f"{run.queue} / {run.priority}"

    @admin.display(description=gettext_lazy("keys"))
    def keys(self, run: Run) -> str:
        rows = [
            (label, shorten(unscope(key)))
            for label, key in ((_("idempotency"), run.idempotency_key), (_("coalesce"), run.coalesce_key))
            if key
        ]
        if not rows:
            return "—"
        return format_html_join(", ", "{}: <code>{}</code>", rows)

    @admin.display(description=gettext_lazy("retry policy"))
    def retry_policy_display(self, run: Run) -> str:
        return format_html("<code>{}</code>", json.dumps(run.retry_policy, sort_keys=True))

    @admin.display(description=gettext_lazy("held by a limit"))
    def held_by_limit(self, run: Run) -> str:
        """Which limit holds this due run back, how many runs it holds and how many run under it now."""
        if run.held_by is None or run.status != RunStatus.PENDING:
            return "—"
        state = api_operations.limit_state(run.held_by)
        held = ngettext("%(count)s run held", "%(count)s runs held", state.held) % {"count": state.held}
        return format_html(
            '<code>{}</code>: <a href="{}">{}</a>, {}',
            shorten(run.held_by),
            held_by_url(run.held_by),
            held,
            _("%(count)s running under it") % {"count": state.running},
        )

    @admin.display(description=gettext_lazy("trace"))
    def trace(self, run: Run) -> str:
        """The trace its enqueue was part of (W3C trace id), to look its spans up in a tracing backend."""
        traceparent = (run.trace_context or {}).get("traceparent", "")
        parts = traceparent.split("-")
        if len(parts) != 4:
            return "—"
        return format_html('<code title="traceparent {}">{}</code>', traceparent, parts[1])

    @admin.display(description=gettext_lazy("cancellation"))
    def cancellation(self, run: Run) -> str:
        parts = [
            (label, moment(when))
            for label, when in (
                (_("requested"), run.cancel_requested_at),
                (_("refused"), run.cancel_refused_at),
                (_("pivot step journalled"), run.pivoted_at),
            )
            if when
        ]
        if not parts:
            return "—"
        return format_html_join("; ", _("{} at {}"), parts)


def held_by_url(key: str) -> str:
    """The runs listing filtered to the runs one limit key holds back."""
    return f"{reverse('admin:durable_django_run_changelist')}?{urlencode({HeldByFilter.parameter_name: key})}"
