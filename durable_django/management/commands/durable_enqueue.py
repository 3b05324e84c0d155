from typing import Any

from django.core.management.base import CommandParser

from ... import api
from ..arguments import json_value
from ._base import DurableCommand


class Command(DurableCommand):
    help = "Enqueue a run of a durable function; prints the run id as the last word."

    def add_arguments(self, parser: CommandParser) -> None:
        super().add_arguments(parser)
        parser.add_argument("name", help="the durable function's registered name")
        parser.add_argument("input", nargs="?", type=json_value, default=None, help="the input, as JSON")
        parser.add_argument("--idempotency-key", help="submits with one key return one run")
        parser.add_argument("--queue", default="default")
        parser.add_argument("--priority", type=int, default=0)

    def handle(self, *args: Any, **options: Any) -> None:
        run = api.enqueue(
            options["name"],
            options["input"],
            idempotency_key=options["idempotency_key"],
            tenant_id=options["tenant"],
            queue=options["queue"],
            priority=options["priority"],
        )
        self.stdout.write(f"enqueued {run.name} v{run.version} [{run.status}] {run.run_id}")
