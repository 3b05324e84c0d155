from typing import Any

from django.core.management.base import CommandParser
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from ... import api
from ..arguments import name
from ._base import DurableCommand


class Command(DurableCommand):
    help = gettext_noop("Cancel a run and its descendants; prints cancelled, requested or refused.")

    def add_arguments(self, parser: CommandParser) -> None:
        super().add_arguments(parser)
        parser.add_argument("run_id", type=name)

    def handle(self, *args: Any, **options: Any) -> None:
        outcome = api.cancel(options["run_id"], tenant_id=options["tenant"])
        self.stdout.write(_("run %(run_id)s: %(outcome)s") % {"run_id": options["run_id"], "outcome": outcome.value})
