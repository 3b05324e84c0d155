import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from ...api import operations
from ..arguments import non_negative_float


class Command(BaseCommand):
    help = (
        "Check the durable system: database, migrations, a live worker, stranded runs, versions no live worker "
        "runs (and, with --max-oldest-pending, how long due runs wait). One line per check; exit 0 when all "
        "pass, 1 otherwise. For container and systemd probes."
    )
    # The checks read the database themselves and report what they find; Django's system checks would only
    # add a traceback path before them.
    requires_system_checks: list[str] = []
    requires_migrations_checks = False

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--max-oldest-pending",
            type=non_negative_float,
            metavar="SECONDS",
            help="fail when a due run (not held by a limit) has waited longer than this to be claimed",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        results = operations.health(max_oldest_pending=options["max_oldest_pending"])
        for result in results:
            self.stdout.write(str(result))
        if not all(result.ok for result in results):
            sys.exit(1)
