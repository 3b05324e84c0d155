from typing import Any

from django.core.management.base import CommandParser
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from ... import api
from ..arguments import json_value, name, priority
from ._base import DurableCommand


class Command(DurableCommand):
    help = gettext_noop("Enqueue a run of a durable function; prints the run id as the last word.")

    def add_arguments(self, parser: CommandParser) -> None:
        super().add_arguments(parser)
        parser.add_argument("name", type=name, help=_("the durable function's registered name"))
        parser.add_argument("input", nargs="?", type=json_value, default=None, help=_("the input, as JSON"))
        parser.add_argument("--idempotency-key", type=name, help=_("submits with one key return one run"))
        parser.add_argument("--queue", type=name, default="default")
        parser.add_argument("--priority", type=priority, default=0)

    def handle(self, *args: Any, **options: Any) -> None:
        run = api.enqueue(
            options["name"],
            options["input"],
            idempotency_key=options["idempotency_key"],
            tenant_id=options["tenant"],
            queue=options["queue"],
            priority=options["priority"],
        )
        self.stdout.write(
            _("enqueued %(function)s v%(version)s [%(status)s] %(run_id)s")
            % {"function": run.name, "version": run.version, "status": run.status, "run_id": run.run_id}
        )
