import json
from typing import Any

from django.core.management.base import CommandParser
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from ... import api
from ..arguments import json_value, name, occurrence
from ._base import DurableCommand


class Command(DurableCommand):
    help = gettext_noop("Emit a signal to a run; prints the stored value (the first one emitted wins).")

    def add_arguments(self, parser: CommandParser) -> None:
        super().add_arguments(parser)
        parser.add_argument("run_id", type=name)
        parser.add_argument("signal", type=name)
        parser.add_argument("value", nargs="?", type=json_value, default=None, help=_("the value, as JSON"))
        parser.add_argument("--occurrence", type=occurrence, default=0)

    def handle(self, *args: Any, **options: Any) -> None:
        stored = api.emit_signal(
            options["run_id"],
            options["signal"],
            options["value"],
            occurrence=options["occurrence"],
            tenant_id=options["tenant"],
        )
        self.stdout.write(
            _("signal %(signal)s of run %(run_id)s: %(value)s")
            % {"signal": options["signal"], "run_id": options["run_id"], "value": json.dumps(stored)}
        )
