from typing import Any

from django.core.management.base import CommandError, CommandParser
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop, ngettext

from ... import api
from ...exceptions import DurableError
from ...registry import registry
from ..celery_beat import Planned, celery_beat_installed, plan
from ._base import DurableCommand


def task_mapping(text: str) -> tuple[str, str]:
    task, sep, function = text.partition("=")
    if not sep or not task.strip() or not function.strip():
        raise CommandError(_("--map takes TASK=FUNCTION, got %(text)s") % {"text": repr(text)})
    return task.strip(), function.strip()


class Command(DurableCommand):
    help = gettext_noop(
        "Read django-celery-beat's crontab and interval periodic tasks and print the schedules they map to; "
        "with --apply, create them. Celery's tables are only read."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        super().add_arguments(parser)
        parser.add_argument(
            "--map", action="append", default=[], metavar="TASK=FUNCTION",
            help=_("schedule the Celery task TASK as the durable function FUNCTION (repeatable)"),
        )  # fmt: skip
        parser.add_argument("--apply", action="store_true", help=_("create the schedules (default: only print them)"))

    def handle(self, *args: Any, **options: Any) -> None:
        if not celery_beat_installed():
            raise CommandError(_("django_celery_beat is not in INSTALLED_APPS: there is nothing to import"))
        mapping = dict(task_mapping(text) for text in options["map"])
        planned = plan(mapping, set(registry.names()))
        created = 0
        for item in planned:
            if item.skipped is not None:
                self.stdout.write(_("skip %(task)s: %(why)s") % {"task": item.task_name, "why": item.skipped})
                continue
            disabled = "" if item.enabled else _(", disabled")
            line = _("%(schedule)s: %(function)s at %(cron)s (%(zone)s)%(disabled)s") % {
                "schedule": item.schedule_id,
                "function": item.function,
                "cron": repr(item.cron),
                "zone": item.tz,
                "disabled": disabled,
            }
            if not options["apply"]:
                self.stdout.write(_("would create %(schedule)s") % {"schedule": line})
                continue
            created += self._create(item, line, options["tenant"])
        total = created if options["apply"] else sum(item.skipped is None for item in planned)
        self.stdout.write(_summary(total, len(planned), applied=options["apply"]))

    def _create(self, item: Planned, line: str, tenant: str | None) -> int:
        assert item.function is not None and item.cron is not None, "only a planned schedule is created"
        try:
            api.create_schedule(
                item.schedule_id, item.function, item.cron, input=item.input, tz=item.tz, tenant_id=tenant,
                enabled=item.enabled,
            )  # fmt: skip
        except DurableError as exc:
            self.stdout.write(_("left %(schedule)s alone: %(error)s") % {"schedule": item.schedule_id, "error": exc})
            return 0
        self.stdout.write(_("created %(schedule)s") % {"schedule": line})
        return 1


def _summary(schedules: int, periodic_tasks: int, *, applied: bool) -> str:
    """The last line: how many schedules the periodic tasks made (or would make), each count in its plural."""
    tasks = ngettext("%(count)d periodic task", "%(count)d periodic tasks", periodic_tasks) % {"count": periodic_tasks}
    if applied:
        line = ngettext(
            "created %(count)d schedule from %(tasks)s", "created %(count)d schedules from %(tasks)s", schedules
        )
    else:
        line = ngettext(
            "would create %(count)d schedule from %(tasks)s",
            "would create %(count)d schedules from %(tasks)s",
            schedules,
        )
    return line % {"count": schedules, "tasks": tasks}
