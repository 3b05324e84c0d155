"""A SIGTERM that lands while the worker's main thread holds the lock of the event the handler must set.

Python runs a signal handler in the main thread between two bytecodes, wherever that thread is: inside
``Event.wait``, its condition's lock held, once the wait wakes. A handler that set that event itself
waited forever for its own thread's lock (a worker under CI's load hung on SIGTERM so). The subprocess
holds that lock, sends itself a real SIGTERM, and only then lets go.
"""

import subprocess
import sys
import textwrap

from tests.helpers import ROOT

SCRIPT = textwrap.dedent(
    """
    import os, signal, threading
    from durable_django.worker.shutdown import install_shutdown_handlers

    class Worker:
        def __init__(self):
            self.wake = threading.Event()

        def request_stop(self):
            self.wake.set()

    worker = Worker()
    install_shutdown_handlers(worker)
    with worker.wake._cond:  # what the main thread holds inside Event.wait
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(1000):  # the handler runs here, between these bytecodes
            pass
        print("the handler returned", flush=True)
    assert worker.wake.wait(30), "the stop was never asked"
    print("stop asked", flush=True)
    """
)


def test_a_sigterm_while_the_main_thread_holds_the_wake_events_lock_asks_the_worker_to_stop():
    done = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["the handler returned", "stop asked"]
