"""Resolving runs named by an import path (Django Tasks) to a handler the engine can call.

Such runs carry version 0 and input ``{"args": [...], "kwargs": {...}}``; any
worker in which the path imports can run them, without a durable.py entry.
"""

from __future__ import annotations

import inspect

from django.utils.module_loading import import_string


class TaskPathError(ImportError):
    """A Django Tasks run names a path that does not import in this worker."""


def task_handler(path: str):
    """A (ctx, input) handler for the task at ``path``."""
    try:
        target = import_string(path)
    except ImportError as exc:
        raise TaskPathError(f"task path {path!r} does not import in this worker: {exc}") from exc
    func = getattr(target, "func", target)
    takes_context = bool(getattr(target, "takes_context", False))
    if not callable(func):
        raise TaskPathError(f"task path {path!r} does not name a callable")

    def call_args(ctx, payload):
        payload = payload or {}
        args, kwargs = list(payload.get("args", [])), dict(payload.get("kwargs", {}))
        if takes_context:
            from .tasks import task_context

            args.insert(0, task_context(target, ctx))
        return args, kwargs

    if inspect.iscoroutinefunction(func):
        async def run_async(ctx, payload):
            args, kwargs = call_args(ctx, payload)
            return await func(*args, **kwargs)

        return run_async

    def run(ctx, payload):
        args, kwargs = call_args(ctx, payload)
        return func(*args, **kwargs)

    return run
