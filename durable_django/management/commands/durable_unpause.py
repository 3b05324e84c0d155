from typing import Any

from django.core.management.base import CommandError, CommandParser
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from ... import api
from ...exceptions import DurableError
from ._base import PackageCommand


class Command(PackageCommand):
    help = gettext_noop(
        "End the pause of a function (--function NAME) or a queue (--queue NAME): its runs start in their order."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        target = parser.add_mutually_exclusive_group(required=True)
        target.add_argument("--function", help=_("the durable function to unpause"))
        target.add_argument("--queue", help=_("the queue to unpause"))

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            ended = api.unpause(function=options["function"], queue=options["queue"])
        except DurableError as exc:
            raise CommandError(str(exc)) from None
        what = (
            _("function %(name)s") % {"name": options["function"]}
            if options["function"] is not None
            else _("queue %(name)s") % {"name": options["queue"]}
        )
        self.stdout.write((_("unpaused %(what)s") if ended else _("%(what)s was not paused")) % {"what": what})
