from typing import Any

from django.core.management.base import CommandParser
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop, ngettext

from ... import api
from ..arguments import duration, positive_int
from ._base import DurableCommand


class Command(DurableCommand):
    help = gettext_noop(
        "Delete finished runs (whole trees, with their steps) that landed longer ago than --older-than."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--older-than", type=duration, required=True, help=_("e.g. 30d, 12h, 90m"))
        parser.add_argument("--batch-size", type=positive_int, default=1000)

    def handle(self, *args: Any, **options: Any) -> None:
        deleted = api.purge_finished(older_than=options["older_than"], batch_size=options["batch_size"])
        self.stdout.write(ngettext("purged %(count)d run", "purged %(count)d runs", deleted) % {"count": deleted})
