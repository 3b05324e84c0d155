"""The durable_worker process: claim loop, attempt threads, heartbeat, listener, shutdown."""

from .loop import Worker, WorkerOptions

__all__ = ["Worker", "WorkerOptions"]
