from typing import Any

from django.core.management.base import CommandParser

from ... import api
from ._base import DurableCommand


class Command(DurableCommand):
    help = "Cancel a run and its descendants; prints cancelled, requested or refused."

    def add_arguments(self, parser: CommandParser) -> None:
        super().add_arguments(parser)
        parser.add_argument("run_id")

    def handle(self, *args: Any, **options: Any) -> None:
        outcome = api.cancel(options["run_id"], tenant_id=options["tenant"])
        self.stdout.write(f"run {options['run_id']}: {outcome.value}")
