"""The documented ``TASKS`` backend path: ``durable_django.tasks.DurableBackend`` (see ``contrib.tasks``)."""

from .contrib.tasks.backend import DurableBackend, DurableTask

__all__ = ["DurableBackend", "DurableTask"]
