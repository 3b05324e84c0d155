"""What the package's commands share: --version, and for the operator commands --tenant and DurableError
as a message with exit 1."""

from typing import Any

import django
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils.translation import gettext as _

from ... import __version__
from ...exceptions import DurableError
from ..arguments import tenant


class PackageCommand(BaseCommand):
    """A command of this package: ``--version`` names the package's release, not Django's alone."""

    def get_version(self) -> str:
        return f"durable-django {__version__} (Django {django.get_version()})"

    def create_parser(self, prog_name: str, subcommand: str, **kwargs: Any) -> CommandParser:
        # A command's help is marked with gettext_noop (the class is read before a language is active) and
        # translated here, when the parser is made for the person reading it.
        self.help = _(self.help) if self.help else self.help
        return super().create_parser(prog_name, subcommand, **kwargs)


class DurableCommand(PackageCommand):
    def create_parser(self, prog_name: str, subcommand: str, **kwargs: Any) -> CommandParser:
        # A command's own --version (a function version) replaces Django's, which prints the release.
        return super().create_parser(prog_name, subcommand, conflict_handler="resolve", **kwargs)

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tenant", type=tenant, help=_("address this tenant's runs only"))

    def execute(self, *args: Any, **options: Any) -> str | None:
        try:
            return super().execute(*args, **options)
        except DurableError as exc:
            raise CommandError(str(exc)) from None
