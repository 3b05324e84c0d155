"""``durable_worker --reload``: the worker under Django's autoreloader, restarted when a Python file changes.

As with ``runserver``, a parent process restarts a child whenever the child
exits to reload; in the child the worker runs in a thread while the main thread
watches the files. Before the child exits to reload, the worker stops the
graceful way, within ``--grace``: the runs it holds are released at once, so
the next child takes them over instead of waiting for their leases to expire.
A worker that stops itself past ``--max-abandoned`` ends its process with
status 3, which the reloader's parent takes as its cue to start a fresh one.
Ctrl-C stops both processes the way it stops ``runserver`` (the parent gives
the child a moment, then kills it); runs still held then are reclaimed when
their leases expire.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

from django.utils import autoreload

from .loop import Worker

# How long past the grace period to wait for the worker to release what it holds.
RELEASE_SECONDS = 10.0


def run_with_reloader(make_worker: Callable[[], Worker]) -> None:
    """Run the worker ``make_worker()`` builds until interrupted, in a fresh process after each code change."""
    started: list[tuple[Worker, threading.Thread]] = []

    def main() -> None:
        worker = make_worker()
        started.append((worker, threading.current_thread()))
        worker.run()
        if worker.exit_code:
            # It stopped itself (too many stuck threads) and released its runs: end this process with that
            # status. Status 3 is also the reloader's restart signal, so its parent starts a fresh process.
            os._exit(worker.exit_code)

    try:
        autoreload.run_with_reloader(main)
    finally:
        # The file watcher is exiting (to reload, or stopped); in the parent that restarts it nothing started.
        for worker, thread in started:
            worker.request_stop()
            thread.join(worker.options.grace + RELEASE_SECONDS)
