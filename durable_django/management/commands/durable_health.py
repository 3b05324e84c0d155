import sys
from typing import Any

from django.core.management.base import CommandParser
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from ...api import operations
from ..arguments import non_negative_int, seconds
from ._base import PackageCommand


class Command(PackageCommand):
    help = gettext_noop(
        "Check the durable system: database, migrations, a live worker, stranded runs, versions no live worker "
        "runs, parked runs (and, with --max-oldest-pending, how long due runs wait). One line per check; exit 0 "
        "when all pass, 1 otherwise. For container and systemd probes."
    )
    # The checks read the database themselves and report what they find; Django's system checks would only
    # add a traceback path before them.
    requires_system_checks: list[str] = []
    requires_migrations_checks = False

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--max-oldest-pending",
            type=seconds,
            metavar="SECONDS",
            help=_("fail when a due run (not held by a limit) has waited longer than this to be claimed"),
        )
        parser.add_argument(
            "--max-parked",
            type=non_negative_int,
            metavar="N",
            help=_("fail when more than N runs are parked (their retries ran out; they wait for an operator)"),
        )

    def handle(self, *args: Any, **options: Any) -> None:
        results = operations.health(max_oldest_pending=options["max_oldest_pending"], max_parked=options["max_parked"])
        for result in results:
            self.stdout.write(str(result))
        if not all(result.ok for result in results):
            sys.exit(1)
