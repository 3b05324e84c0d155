"""Template filters of the admin's pages (``{% load durable_admin %}``)."""

from datetime import datetime

from django import template

from ..admin.display import moment as moment_text
from ..admin.display import outcome_word

register = template.Library()


@register.filter
def moment(when: datetime | None) -> str:
    """An instant as the admin shows every instant: in its zone, to the second, and never raising on one
    so near year 1 or 9999 that the zone takes it out of Python's range (the ``date`` filter would)."""
    return "" if when is None else moment_text(when)


@register.filter
def word(value: str) -> str:
    """A run's status or an attempt's outcome in the reader's language (``{{ run.status|word }}``)."""
    return outcome_word(value)
