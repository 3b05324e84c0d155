from typing import Any

from django.core.management.base import CommandParser

from ... import api
from ._base import DurableCommand


class Command(DurableCommand):
    help = "Resume a failed or cancelled run with its journal intact."

    def add_arguments(self, parser: CommandParser) -> None:
        super().add_arguments(parser)
        parser.add_argument("run_id")

    def handle(self, *args: Any, **options: Any) -> None:
        run = api.resume(options["run_id"], tenant_id=options["tenant"])
        self.stdout.write(f"run {run.run_id}: {run.status}")
