from typing import Any

from django.core.management.base import CommandParser
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from ... import api
from ..arguments import name, positive_int
from ._base import DurableCommand


class Command(DurableCommand):
    help = gettext_noop("Resume a failed or cancelled run with its journal intact (on another version with --version).")

    def add_arguments(self, parser: CommandParser) -> None:
        super().add_arguments(parser)
        parser.add_argument("run_id", type=name)
        parser.add_argument("--version", type=positive_int, help=_("resume on this version of its function"))

    def handle(self, *args: Any, **options: Any) -> None:
        run = api.resume(options["run_id"], version=options["version"], tenant_id=options["tenant"])
        line = _("run %(run_id)s: %(status)s") % {"run_id": run.run_id, "status": run.status}
        if options["version"]:
            line += _(", version %(version)s") % {"version": run.version}
        self.stdout.write(line)
