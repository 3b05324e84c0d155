from typing import Any

from django.core.management.base import CommandError, CommandParser
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from ... import api
from ...exceptions import DurableError
from ._base import PackageCommand


class Command(PackageCommand):
    help = gettext_noop(
        "Pause a function (--function NAME) or a queue (--queue NAME): no worker starts a new attempt of it until "
        "durable_unpause; running attempts finish. --list prints the pauses."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        target = parser.add_mutually_exclusive_group(required=True)
        target.add_argument("--function", help=_("the durable function to pause"))
        target.add_argument("--queue", help=_("the queue to pause"))
        target.add_argument("--list", action="store_true", help=_("print every pause, oldest first"))
        parser.add_argument("--reason", default="", help=_("why, as the admin and the workers show it"))

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            if options["list"]:
                for pause in api.list_pauses():
                    self.stdout.write(describe(pause))
                return
            pause = api.pause(function=options["function"], queue=options["queue"], reason=options["reason"])
        except DurableError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(_("paused %(pause)s") % {"pause": describe(pause)})


def describe(pause: api.Pause) -> str:
    """One line per pause: what, since when, why."""
    what = (
        _("function %(name)s") % {"name": pause.function}
        if pause.function is not None
        else _("queue %(name)s") % {"name": pause.queue}
    )
    reason = f": {pause.reason}" if pause.reason else ""
    since = _("%(what)s since %(when)s") % {"what": what, "when": f"{pause.created_at:%Y-%m-%d %H:%M:%S %Z}"}
    return f"{since}{reason}"
