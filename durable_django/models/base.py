"""What every durable table's model shares: it reads, and every write through it raises ``ReadOnlyRecord``."""

from typing import Any, NoReturn, TypeVar

from django.db import models

from ..exceptions import ReadOnlyRecord

_M = TypeVar("_M", bound=models.Model)


def _refuse(*args: Any, **kwargs: Any) -> NoReturn:
    raise ReadOnlyRecord()


class ReadOnlyQuerySet(models.QuerySet[_M]):
    """A queryset that reads; every write raises ReadOnlyRecord."""

    create = get_or_create = update_or_create = bulk_create = bulk_update = update = delete = _refuse


class DurableModel(models.Model):
    """A durable table's model: read through it, never write through it."""

    objects = ReadOnlyQuerySet.as_manager()

    class Meta:
        abstract = True

    def save(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise ReadOnlyRecord()

    def delete(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise ReadOnlyRecord()
