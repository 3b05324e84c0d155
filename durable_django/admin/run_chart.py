"""A run's timeline chart: a bar per attempt, executed step, sleep or wait, and child, on one time axis.

Drawn on the server as SVG (``run/live.html``), from bounded reads: the latest attempts, the steps that
record when their fn ran, and the first children. The live part of the run page (this chart and the
attempts) is served again by ``RunAdmin.live_view`` (``run_actions``), which the page fetches while the run
is live.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db.models.functions import Substr
from django.http import HttpRequest
from django.utils import timezone
from django.utils.translation import gettext as _

from ..conf import durable_settings
from ..journal_ids import StepId
from ..models import Attempt, Run, Step
from ..states import LIVE_STATUSES, RunStatus
from .display import compact_duration, moment, outcome_word, readable_traceback
from .run_columns import claims_and_failures

# At most this many attempts, steps and children are read and drawn.
MAX_ATTEMPTS = 100
MAX_STEP_BARS = 200
MAX_CHILD_BARS = 50
# The longest traceback shown for the selected attempt.
MAX_TRACEBACK_CHARS = 20_000
# The chart's geometry, in SVG pixels: a label column, then the time axis.
LABEL_WIDTH = 260
PLOT_WIDTH = 1000
ROW_HEIGHT = 20
AXIS_HEIGHT = 24
TICKS = 6


@dataclass(frozen=True, slots=True)
class Bar:
    """One row of the chart: what it stands for, when, and where it is drawn."""

    kind: str  # attempt, step, wait or child
    label: str
    start: datetime
    end: datetime
    # A CSS class naming its state (the attempt's outcome, the child's status).
    state: str
    x: float = 0.0
    width: float = 0.0
    y: float = 0.0

    @property
    def title(self) -> str:
        return _("%(label)s: %(start)s to %(end)s (%(duration)s)") % {
            "label": self.label,
            "start": moment(self.start),
            "end": moment(self.end),
            "duration": compact_duration(self.end - self.start),
        }


def live_context(run: Run, request: HttpRequest) -> dict[str, Any]:
    """The live part of a run's page: its attempts (the selected one's traceback) and its timeline chart."""
    alias = durable_settings.DATABASE
    now = timezone.now()
    attempts = list(
        Attempt.objects.using(alias).filter(run_id=run.run_id).order_by("-number").defer("error")[:MAX_ATTEMPTS]
    )[::-1]
    rows = [_attempt_row(attempt) for attempt in attempts]
    if run.status == RunStatus.RUNNING:
        rows.append(_running_row(run, now))
    selected = _selected(request, rows)
    traceback = None
    if selected is not None and selected["error_type"]:
        error = (
            Attempt.objects.using(alias)
            .filter(run_id=run.run_id, number=selected["number"])
            .annotate(head=Substr("error", 1, MAX_TRACEBACK_CHARS))
            .values_list("head", flat=True)
            .first()
        )
        traceback = readable_traceback(error) if error else None
    steps = list(
        Step.objects.using(alias)
        .filter(run_id=run.run_id, started_at__isnull=False)
        .order_by("started_at")
        .values_list("step_id", "started_at", "duration")[:MAX_STEP_BARS]
    )
    children = list(
        Run.objects.using(alias)
        .filter(parent_run_id=run.run_id)
        .order_by("created_at", "run_id")
        .values_list("run_id", "name", "status", "created_at", "finished_at")[:MAX_CHILD_BARS]
    )
    bars = _bars(run, attempts, steps, children, now)
    chart = _layout(bars, now)
    return {
        "run": run,
        "live": run.status in LIVE_STATUSES,
        "attempts": rows,
        "selected_attempt": selected,
        "selected_traceback": traceback,
        "chart": chart,
        "claims_summary": claims_and_failures(run, short=False),
    }


def _attempt_row(attempt: Attempt) -> dict[str, Any]:
    duration = attempt.ended_at - attempt.started_at if attempt.started_at else None
    return {
        "number": attempt.number,
        "outcome": attempt.outcome,
        "worker_id": attempt.worker_id,
        "started_at": attempt.started_at,
        "ended_at": attempt.ended_at,
        "duration": _took(duration) if duration is not None else "",
        "error_type": attempt.error_type,
        "waited_for": attempt.waited_for,
    }


def _running_row(run: Run, now: datetime) -> dict[str, Any]:
    started = run.attempt_started_at or run.claimed_at
    return {
        "number": run.attempts,
        "outcome": "running",
        "worker_id": run.worker_id,
        "started_at": started,
        "ended_at": None,
        "duration": _took(now - started) if started else "",
        "error_type": None,
        "waited_for": None,
    }


def _selected(request: HttpRequest, rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The attempt ``?attempt=N`` names, else the latest that ended with an error."""
    wanted = request.GET.get("attempt", "")
    for row in rows:
        if wanted.isdigit() and row["number"] == int(wanted):
            return row
    with_errors = [row for row in rows if row["error_type"]]
    return with_errors[-1] if with_errors and not wanted else None


def _bars(
    run: Run,
    attempts: list[Attempt],
    steps: list[tuple[str, datetime | None, timedelta | None]],
    children: list[tuple[str, str, str, datetime, datetime | None]],
    now: datetime,
) -> list[Bar]:
    bars: list[Bar] = []
    for index, attempt in enumerate(attempts):
        start = attempt.started_at or attempt.ended_at
        bars.append(
            Bar(
                "attempt",
                _("attempt %(number)s: %(outcome)s")
                % {"number": attempt.number, "outcome": outcome_word(attempt.outcome)},
                start,
                attempt.ended_at,
                attempt.outcome,
            )
        )
        if attempt.outcome == "suspended":
            # The wait lasted until the next claim (or lasts still).
            following = attempts[index + 1].started_at if index + 1 < len(attempts) else None
            if following is None and run.status == RunStatus.RUNNING:
                following = run.attempt_started_at or run.claimed_at
            end = following or (now if run.status == RunStatus.WAITING else run.finished_at or now)
            waited = _("waits: %(what)s") % {"what": attempt.waited_for or _("wait")}
            bars.append(Bar("wait", waited, attempt.ended_at, end, "wait"))
    if run.status == RunStatus.RUNNING and (started := run.attempt_started_at or run.claimed_at):
        running = _("attempt %(number)s: %(outcome)s") % {"number": run.attempts, "outcome": outcome_word("running")}
        bars.append(Bar("attempt", running, started, now, "running"))
    if run.parked_at is not None and run.status == RunStatus.WAITING:
        bars.append(Bar("wait", _("parked: waits for an operator"), run.parked_at, now, "parked"))
    for step_id, started, duration in steps:
        if started is None:  # read only with a start: the query filters these out
            continue
        try:
            name = StepId.parse(step_id).name
        except ValueError:
            name = step_id
        bars.append(
            Bar("step", _("step %(name)s") % {"name": name}, started, started + (duration or timedelta(0)), "step")
        )
    for child_id, name, status, created, finished in children:
        label = _("child %(function)s %(run_id)s") % {"function": name, "run_id": child_id[:8]}
        bars.append(Bar("child", label, created, finished or now, status))
    # A waterfall: each bar below the one that began before it.
    return sorted(bars, key=lambda bar: bar.start)


def _took(delta: timedelta) -> str:
    """How long an attempt took: to the millisecond below ten seconds (most attempts are that short)."""
    seconds = delta.total_seconds()
    return f"{seconds:.3f}s" if seconds < 10 else compact_duration(delta)


def _offset(seconds: float) -> str:
    """An axis tick: seconds since the chart's start, to a tenth below a minute."""
    return f"+{seconds:.1f}s" if seconds < 60 else "+" + compact_duration(timedelta(seconds=seconds))


def _layout(bars: list[Bar], now: datetime) -> dict[str, Any]:
    """Place the bars on one axis from the earliest start to the latest end."""
    if not bars:
        return {"bars": [], "ticks": [], "height": AXIS_HEIGHT, "width": LABEL_WIDTH + PLOT_WIDTH}
    first = min(bar.start for bar in bars)
    last = max(max(bar.end for bar in bars), first + timedelta(milliseconds=1))
    span = (last - first).total_seconds()
    placed = []
    for row, bar in enumerate(bars):
        x = LABEL_WIDTH + (bar.start - first).total_seconds() / span * PLOT_WIDTH
        width = max((bar.end - bar.start).total_seconds() / span * PLOT_WIDTH, 2.0)
        placed.append(
            Bar(
                bar.kind,
                bar.label,
                bar.start,
                bar.end,
                bar.state,
                round(x, 1),
                round(width, 1),
                AXIS_HEIGHT + row * ROW_HEIGHT,
            )
        )
    ticks = [(round(LABEL_WIDTH + PLOT_WIDTH * n / TICKS, 1), _offset(span * n / TICKS)) for n in range(TICKS + 1)]
    return {
        "bars": placed,
        "ticks": ticks,
        "start": first,
        "height": AXIS_HEIGHT + len(placed) * ROW_HEIGHT + 4,
        "width": LABEL_WIDTH + PLOT_WIDTH,
        "label_width": LABEL_WIDTH,
    }
