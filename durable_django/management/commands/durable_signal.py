import json
from typing import Any

from django.core.management.base import CommandParser

from ... import api
from ..arguments import json_value
from ._base import DurableCommand


class Command(DurableCommand):
    help = "Emit a signal to a run; prints the stored value (the first one emitted wins)."

    def add_arguments(self, parser: CommandParser) -> None:
        super().add_arguments(parser)
        parser.add_argument("run_id")
        parser.add_argument("signal")
        parser.add_argument("value", nargs="?", type=json_value, default=None, help="the value, as JSON")
        parser.add_argument("--occurrence", type=int, default=0)

    def handle(self, *args: Any, **options: Any) -> None:
        stored = api.emit_signal(
            options["run_id"],
            options["signal"],
            options["value"],
            occurrence=options["occurrence"],
            tenant_id=options["tenant"],
        )
        self.stdout.write(f"signal {options['signal']} of run {options['run_id']}: {json.dumps(stored)}")
