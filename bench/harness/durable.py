"""The harness's job: note its pickup latency, do JOB_WORK_MS of work, tell the adapter it finished.

The latency is the harness's definition (handler start minus the enqueue time the producer wrote into the
input), the same as procrastinate's adapter measures. It travels to the adapter process on a Unix datagram
socket, so the measurement puts no load on the database under test.
"""

import contextlib
import os
import socket
import struct
import time

from durable_django import durable_function

WORK_SECONDS = int(os.environ.get("JOB_WORK_MS", "1")) / 1000.0
REPORT_SOCKET = os.environ.get("HARNESS_REPORT_SOCKET", "")
_sender = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)


@durable_function("harness.job")
def job(ctx, input):
    latency_ms = max(0.0, (time.time() - input["created_at"]) * 1000.0)
    if WORK_SECONDS:
        time.sleep(WORK_SECONDS)
    if REPORT_SOCKET:
        with contextlib.suppress(OSError):  # the adapter is gone (killed by the harness): nobody is counting
            _sender.sendto(struct.pack("!d", latency_ms), REPORT_SOCKET)
    return None
