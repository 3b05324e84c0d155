from typing import Any

from django.core.management.base import CommandParser
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from ... import api
from ...states import RunStatus
from ..arguments import name, positive_int
from ._base import DurableCommand


class Command(DurableCommand):
    help = gettext_noop("List runs, newest first.")

    def add_arguments(self, parser: CommandParser) -> None:
        super().add_arguments(parser)
        parser.add_argument("--status", choices=RunStatus.values)
        parser.add_argument("--name", type=name, help=_("only runs of this function"))
        parser.add_argument("--limit", type=positive_int, default=50)

    def handle(self, *args: Any, **options: Any) -> None:
        page = api.list_runs(
            status=options["status"], name=options["name"], tenant_id=options["tenant"], limit=options["limit"]
        )
        for run in page.items:
            self.stdout.write(
                f"{run.run_id}  {run.status:<9}  {run.name} v{run.version}  attempts={run.attempts}  "
                f"created={run.created_at:%Y-%m-%d %H:%M:%S}"
            )
        if not page.items:
            self.stdout.write(_("no runs"))
