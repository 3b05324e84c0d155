"""Django signals of a run's life, for receivers in the application (audit logs, webhooks, metrics).

Each is sent with the :class:`~durable_django.types.Run` class as ``sender``, as
model signals send their model class (a receiver picks its functions by
``run.name``), once the write it reports has committed (``transaction.on_commit``),
from the process that made the write. A receiver that raises is logged on the
``durable_django.signals`` logger and never changes the run.

- ``run_enqueued(run)``: ``enqueue`` or ``enqueue_many`` (and so the Tasks backend) inserted a new
  run; a debounced call, and one that a key joined to an existing run, send nothing.
- ``attempt_started(run, attempt)``: an attempt began executing the handler;
  ``attempt`` is its number (the run's fence token).
- ``attempt_finished(run, attempt, outcome)``: the attempt's outcome is stored:
  ``succeeded``, ``failed``, ``retrying``, ``suspended``, ``cancelled`` or ``timed_out``.
- ``run_finished(run)``: the run reached ``succeeded``, ``failed`` or ``cancelled`` by an attempt's
  landing or by ``cancel()`` of a run that was not running; ``run`` is read back after the write.
"""

from django.dispatch import Signal

run_enqueued = Signal()
attempt_started = Signal()
attempt_finished = Signal()
run_finished = Signal()
