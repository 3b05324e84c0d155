from typing import Any

from django.core.management.base import CommandParser
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from ... import api
from ..arguments import positive_int
from ._base import DurableCommand


class Command(DurableCommand):
    help = gettext_noop(
        "Fork a run: a new run of the same function and input whose journal is a copy of the run's entries "
        "before --from-step (all of them without it), on --version or the run's own. Prints the new run's id."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        super().add_arguments(parser)
        parser.add_argument("run_id")
        parser.add_argument("--from-step", metavar="STEP", help=_("the step the fork executes from (a step name)"))
        parser.add_argument("--version", type=positive_int, help=_("the function version the fork runs on"))

    def handle(self, *args: Any, **options: Any) -> None:
        fork = api.fork(
            options["run_id"], from_step=options["from_step"], version=options["version"], tenant_id=options["tenant"]
        )
        self.stdout.write(
            _("run %(run_id)s: %(status)s, forked from %(origin)s (version %(version)s)")
            % {"run_id": fork.run_id, "status": fork.status, "origin": options["run_id"], "version": fork.version}
        )
