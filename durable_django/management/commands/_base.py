"""What the operator commands share: --tenant, and DurableError as a message with exit 1."""

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ...exceptions import DurableError
from ..arguments import tenant


class DurableCommand(BaseCommand):
    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tenant", type=tenant, help="address this tenant's runs only")

    def execute(self, *args: Any, **options: Any) -> str | None:
        try:
            return super().execute(*args, **options)
        except DurableError as exc:
            raise CommandError(str(exc)) from None
