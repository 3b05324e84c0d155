"""A run's page: timeline, input, output, error, parent and children, journal, signals, events and streams,
under a fixed size.

Large values are cut by PostgreSQL before they are read (the run comes
without them), the journal comes a page at a time (``?journal_page=``), and
signals and children are capped, so the page's size does not grow with the run.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.contrib.admin.utils import quote
from django.core.paginator import Paginator
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.http import urlencode
from django.utils.translation import gettext as _

from ..conf import durable_settings
from ..exceptions import DeadlineExceeded
from ..journal_ids import StepId
from ..models import ReplayDivergence, Run, Signal, Step
from ..states import LIVE_STATUSES, RunStatus
from .control import ALL_RUN_OPERATIONS
from .display import (
    MAX_CELL_CHARS,
    MAX_JSON_CHARS,
    compact_duration,
    cut_error,
    cut_text,
    error_excerpt,
    json_excerpt,
    moment,
    readable_traceback,
    shorten,
    status_badge,
)
from .run_chart import live_context
from .run_published import published_context

if TYPE_CHECKING:  # only for the annotation: runs imports this module
    from .runs import RunAdmin

# The journal is shown this many entries at a time; signals and children are capped.
JOURNAL_PAGE_ROWS = 50
MAX_SIGNAL_ROWS = 50
MAX_CHILD_ROWS = 50
MAX_DIVERGENCE_ROWS = 10


def run_page_context(model_admin: RunAdmin, request: HttpRequest, run: Run) -> dict[str, Any]:
    """Timeline, JSON, tree, journal, signals and the buttons this user may press.

    Large values are cut by PostgreSQL (the run comes without them), and the
    journal shows the page ``?journal_page=`` asks for.
    """
    alias = durable_settings.DATABASE
    # The plugin cannot see the keys of the ``**`` annotations: the excerpts' columns, read by name below.
    values: Mapping[str, Any] = (
        Run.objects.using(alias)
        .filter(pk=run.pk)
        .values(
            **json_excerpt("input", MAX_JSON_CHARS),
            **json_excerpt("output", MAX_JSON_CHARS),
            **json_excerpt("progress", MAX_JSON_CHARS),
            **error_excerpt(),
        )
        .get()
    )
    run_signals = Signal.objects.using(alias).filter(run_id=run.run_id)
    signal_order = ("created_at", "signal", "occurrence")
    signal_keys = list(run_signals.order_by(*signal_order).values_list("pk", flat=True)[: MAX_SIGNAL_ROWS + 1])
    signals = cut_rows(run_signals, signal_keys, signal_order, "value")
    children = list(
        Run.objects.using(alias)
        .filter(parent_run_id=run.run_id)
        .order_by("created_at", "run_id")
        .only("run_id", "name", "version", "status", "created_at")[: MAX_CHILD_ROWS + 1]
    )
    steps = Step.objects.using(alias).filter(run_id=run.run_id)
    step_order = ("created_at", "step_id")
    journal_page = Paginator(steps.order_by(*step_order).values_list("pk", flat=True), JOURNAL_PAGE_ROWS).get_page(
        request.GET.get("journal_page")
    )
    journal = cut_rows(steps, list(journal_page), step_order, "result")
    output = cut_text(values["output_text"], values["output_chars"])
    error = cut_error(values["error_head"], values["error_tail"], values["error_chars"])
    return {
        **published_context(alias, run.run_id),
        **live_context(run, request),
        "live_url": reverse("admin:durable_django_run_live", args=[quote(run.run_id)]),
        "run": run,
        # Attempts whose replay took another path than the journal's: the code changed under the run.
        "divergences": list(
            ReplayDivergence.objects.using(alias).filter(run_id=run.run_id).order_by("id")[:MAX_DIVERGENCE_ROWS]
        ),
        "timeline": run_timeline(run),
        "input_json": cut_text(values["input_text"], values["input_chars"]) or "null",
        "error_traceback": readable_traceback(error) if error else None,
        # The exception's own line (the traceback's last), read first; a failed run shows its error on top.
        "error_message": error_message(values["error_tail"]),
        "error_first": run.status == RunStatus.FAILED,
        "output_json": output if output is not None else ("null" if run.status == RunStatus.SUCCEEDED else None),
        "progress_json": cut_text(values["progress_text"], values["progress_chars"]),
        "parent_exists": run.parent_run_id and Run.objects.using(alias).filter(pk=run.parent_run_id).exists(),
        "children": [(child, status_badge(child.status)) for child in children[:MAX_CHILD_ROWS]],
        "more_children": len(children) > MAX_CHILD_ROWS,
        "children_url": reverse("admin:durable_django_run_changelist") + "?" + urlencode({"parent": run.run_id}),
        "journal": [journal_row(step, number) for number, step in enumerate(journal, journal_page.start_index())],
        "journal_page": journal_page,
        "signals": [
            {**signal, "signal": shorten(signal["signal"]), "created_at": moment(signal["created_at"])}
            for signal in signals[:MAX_SIGNAL_ROWS]
        ],
        "more_signals": len(signals) > MAX_SIGNAL_ROWS,
        "run_operations": [
            (operation, reverse(f"admin:durable_django_run_{operation.key}", args=[quote(run.run_id)]))
            for operation in ALL_RUN_OPERATIONS.values()
            if (operation.offered(run) or (operation.key == "resume" and is_parked(run)))
            and getattr(model_admin, f"has_{operation.permission}_permission")(request, run)
        ],
        # Each journal row's "fork from this step", for users who may fork.
        "fork_url": (
            reverse("admin:durable_django_run_fork", args=[quote(run.run_id)])
            if model_admin.has_fork_permission(request, run)
            else None
        ),
    }


def shown_fields(model_admin: RunAdmin, run: Run) -> list[str]:
    """The summary's rows that say something about this run: an empty one (an em dash) is left out."""
    shown = []
    for field in model_admin.readonly_fields:
        display = getattr(model_admin, field, None)
        value = display(run) if callable(display) else getattr(run, field)
        if value not in (None, "", "—"):
            shown.append(field)
    return shown


def error_message(tail: str | None) -> str | None:
    """The last line of a stored error: the exception and its message, under the traceback's frames."""
    if not tail:
        return None
    lines = [line for line in tail.splitlines() if line.strip()]
    return shorten(lines[-1].strip()) if lines else None


def is_parked(run: Run) -> bool:
    """Its retries ran out under ``on_exhausted="park"``: it waits for an operator's resume or cancel."""
    return run.status == RunStatus.WAITING and run.parked_at is not None


def run_timeline(run: Run) -> list[tuple[str, str, str]]:
    """(label, when, note) rows of a run's life, in order, skipping what has not happened."""
    rows: list[tuple[str, datetime | None, str]] = [
        (_("created"), run.created_at, ""),
        (
            _("available at"),
            run.available_at,
            _("not claimed before this") if run.status == RunStatus.PENDING else _("deadline"),
        ),
        (_("first claimed"), run.started_at, _since(run.created_at, run.started_at, _("after creation"))),
        (_("last claimed"), run.claimed_at, _claim_note(run)),
        (
            _("leased until"),
            run.leased_until if run.status == RunStatus.RUNNING else None,
            _("the holder renews it while alive"),
        ),
        (_("deadline"), run.deadline, _deadline_note(run)),
        (_("parked"), run.parked_at if is_parked(run) else None, _("its retries ran out: resume or cancel it")),
        (_("cancel requested"), run.cancel_requested_at, ""),
        (_("cancel refused"), run.cancel_refused_at, ""),
        (_("finished"), run.finished_at, _since(run.started_at or run.created_at, run.finished_at, _("after start"))),
        (_("updated"), run.updated_at, ""),
    ]
    return [(label, moment(when), note) for label, when, note in rows if when is not None]


def _claim_note(run: Run) -> str:
    if run.worker_id:
        return _("claim %(number)s by %(worker)s") % {"number": run.attempts, "worker": run.worker_id}
    return _("claim %(number)s") % {"number": run.attempts}


def _deadline_note(run: Run) -> str:
    if run.error_type == DEADLINE_EXCEEDED:
        return _("passed: the run failed with DeadlineExceeded")
    if run.status in LIVE_STATUSES:
        return _("not finished by then, it fails with DeadlineExceeded")
    return ""


# The error class path of a run its deadline failed.
DEADLINE_EXCEEDED = f"{DeadlineExceeded.__module__}.{DeadlineExceeded.__qualname__}"


def _since(start: datetime | None, end: datetime | None, words: str) -> str:
    if start is None or end is None:
        return ""
    return f"{compact_duration(end - start)} {words}"


def cut_rows(queryset: QuerySet[Any], keys: list[Any], ordering: tuple[str, ...], field: str) -> list[dict[str, Any]]:
    """The rows of ``keys`` in ``ordering``, each with its jsonb ``field`` as indented text cut in SQL.

    The caller picks the keys first, so PostgreSQL never indents a value that
    its sort or page would then throw away.
    """
    rows = (
        queryset.filter(pk__in=keys)
        .order_by(*ordering)
        .values(*(column for column in ordering if column != field), **json_excerpt(field, MAX_CELL_CHARS, "value"))
    )
    return [{**row, "value": cut_text(row.pop("value_text"), row.pop("value_chars"))} for row in rows]


def journal_row(step: dict[str, Any], number: int) -> dict[str, Any]:
    """A journal entry with its step id taken apart (an id that is not a step id is shown whole)."""
    try:
        parsed = StepId.parse(step["step_id"])
        name, occurrence, version = parsed.name, str(parsed.occurrence), str(parsed.version)
        kind = _("deadline") if parsed.deadline else ""
        step_name: str | None = parsed.name
    except ValueError:
        name, occurrence, version, kind, step_name = step["step_id"], "", "", "", None
    return {
        "number": number,
        "step_id": step["step_id"],
        "name": shorten(name),
        # What fork(from_step=...) takes.
        "step_name": step_name,
        "occurrence": occurrence,
        "version": version,
        "kind": kind,
        "created_at": moment(step["created_at"]),
        "result": step["value"],
    }
