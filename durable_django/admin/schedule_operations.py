"""The operations on a schedule: enable, disable, fire now.

Each is an ``Operation`` (``operations``) calling the schedules API with the
schedule's address as the API takes it (``schedule_address``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from .. import api
from ..exceptions import DurableError, InvalidInput
from ..models import Schedule
from ..tenancy import unscope
from .operations import ActionResult, Operation, by_key


def schedule_address(record: Schedule) -> tuple[str, str | None]:
    """A stored schedule as the API addresses it: the id as it was passed, and its tenant."""
    return unscope(record.schedule_id), (str(record.tenant_id) if record.tenant_id else None)


def _set_enabled(enabled: bool) -> Callable[[Schedule, dict[str, Any]], ActionResult]:
    def perform(record: Schedule, data: dict[str, Any]) -> ActionResult:
        schedule_id, tenant_id = schedule_address(record)
        try:
            schedule = api.set_schedule_enabled(schedule_id, enabled, tenant_id=tenant_id)
        except InvalidInput as exc:
            return ActionResult(label=_("not found"), detail=str(exc), ok=False)
        return ActionResult(
            label=_("enabled") if enabled else _("disabled"),
            detail=(
                _("next fire at %(when)s UTC") % {"when": f"{schedule.next_fire_at:%Y-%m-%d %H:%M:%S}"}
                if enabled
                else _("no next fire")
            ),
        )

    return perform


def fire_schedule(record: Schedule, data: dict[str, Any]) -> ActionResult:
    """``fire_schedule_now()``: one run now, the regular ticks left as they are."""
    schedule_id, tenant_id = schedule_address(record)
    try:
        run = api.fire_schedule_now(schedule_id, tenant_id=tenant_id)
    except DurableError as exc:
        return ActionResult(label=_("refused"), detail=str(exc), ok=False)
    return ActionResult(
        label=_("fired"), detail=_("a run of %(function)s was enqueued") % {"function": run.name}, new_run_id=run.run_id
    )


SCHEDULE_OPERATIONS = by_key(
    Operation(
        key="enable",
        verb=gettext_lazy("Enable"),
        action_description=gettext_lazy("Enable the selected schedules"),
        permission="change",
        perform=_set_enabled(True),
        explanation=gettext_lazy(
            "Enabled schedules fire at their next tick; ticks that passed while they were disabled are not fired."
        ),
    ),
    Operation(
        key="disable",
        verb=gettext_lazy("Disable"),
        action_description=gettext_lazy("Disable the selected schedules"),
        permission="change",
        perform=_set_enabled(False),
        explanation=gettext_lazy("Disabled schedules keep their definition and fire nothing until enabled again."),
    ),
    Operation(
        key="fire",
        verb=gettext_lazy("Fire now"),
        action_description=gettext_lazy("Fire the selected schedules now"),
        permission="fire",
        perform=fire_schedule,
        explanation=gettext_lazy(
            "Each schedule enqueues one run now, enabled or not; its regular ticks stay as they are."
        ),
    ),
)
