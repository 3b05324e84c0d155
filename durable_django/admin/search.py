"""The runs search box's input terms: ``input.customer=42``, ``input.address.city="Berlin"``.

Each term names a path into the run's input and a value (JSON: a number, a
quoted string, true, false, null; anything else is taken as a string); the
terms together become one JSON document that the input must contain (jsonb
``@>``, served by the input's GIN index).
"""

from __future__ import annotations

import json
import re
from typing import Any

from django.contrib.admin.options import IncorrectLookupParameters
from django.utils.translation import gettext as _

PREFIX = "input."

# One term: input.<path>=<value>, the value a quoted JSON string or a run of non-space characters.
_TERM = re.compile(r'input\.(?P<path>[^\s=]+)=(?P<value>"(?:[^"\\]|\\.)*"|\S*)')


def is_input_search(term: str) -> bool:
    return term.startswith(PREFIX)


def input_document(term: str) -> dict[str, Any]:
    """The JSON document the input terms of ``term`` describe.

    Raises:
        IncorrectLookupParameters: a term that is not ``input.<path>=<value>``, a path with an empty part,
            or two terms that contradict each other (the admin shows its "invalid search" page, never an error).
    """
    document: dict[str, Any] = {}
    position = 0
    for match in _TERM.finditer(term):
        if term[position : match.start()].strip():
            break
        position = match.end()
        keys = match["path"].split(".")
        if not all(keys):
            raise IncorrectLookupParameters(_("an empty key in %(term)s") % {"term": repr(match.group(0))})
        raw = match["value"]
        try:
            value = json.loads(raw) if raw else ""
        except json.JSONDecodeError:
            value = raw
        _merge(document, keys, value, match.group(0))
    if not document or term[position:].strip():
        raise IncorrectLookupParameters(_("not input.<path>=<value> terms: %(terms)s") % {"terms": repr(term)})
    return document


def _merge(document: dict[str, Any], keys: list[str], value: Any, shown: str) -> None:
    node = document
    for key in keys[:-1]:
        child = node.setdefault(key, {})
        if not isinstance(child, dict):
            raise IncorrectLookupParameters(_("%(term)s contradicts an earlier term") % {"term": repr(shown)})
        node = child
    if keys[-1] in node and node[keys[-1]] != value:
        raise IncorrectLookupParameters(_("%(term)s contradicts an earlier term") % {"term": repr(shown)})
    node[keys[-1]] = value
