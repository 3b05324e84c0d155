"""Form fields of the admin's forms, each checking what an operator types against the storable domain.

A value the API would refuse (a NUL or a lone surrogate, a name past its length,
an integer past PostgreSQL's ``integer``, JSON too deep, too large or not JSON at
all) is a form error on its field, never a 500: the rules are the domain's
(``durable_django.storable``), not the form's.
"""

from __future__ import annotations

from typing import Any

from django import forms

from .. import storable
from ..exceptions import InvalidInput


class JSONValueField(forms.CharField):
    """A JSON document typed into a textarea; empty means null."""

    widget = forms.Textarea(attrs={"rows": 4, "cols": 60, "class": "vLargeTextField"})

    def to_python(self, value: Any) -> Any:
        # CharField gives its empty_value ("" here) for an empty input, never None.
        text = (super().to_python(value) or "").strip()
        if not text:
            return None
        try:
            return storable.json_value(text, what="the value")
        except InvalidInput as exc:
            raise forms.ValidationError(str(exc)) from None


class NameField(forms.CharField):
    """A name or key (a signal, a schedule id): storable text of at most MAX_NAME_CHARS characters."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(max_length=storable.MAX_NAME_CHARS, **kwargs)

    def to_python(self, value: Any) -> Any:
        text = super().to_python(value)
        if text in self.empty_values:
            return text
        try:
            return storable.name(text, what="this name")
        except InvalidInput as exc:
            raise forms.ValidationError(str(exc)) from None


class StorableTextField(forms.CharField):
    """Free text stored as typed (a cron expression): no NUL, no lone surrogate."""

    def to_python(self, value: Any) -> Any:
        text = super().to_python(value)
        if text in self.empty_values:
            return text
        try:
            return storable.text(text, what="this text")
        except InvalidInput as exc:
            raise forms.ValidationError(str(exc)) from None


class StoredIntegerField(forms.IntegerField):
    """An integer for an ``integer`` column (a signal's occurrence), from ``min_value`` to its largest."""

    def __init__(self, *, min_value: int = storable.PG_INTEGER_MIN, **kwargs: Any) -> None:
        super().__init__(min_value=min_value, max_value=storable.PG_INTEGER_MAX, **kwargs)
