"""The client API: what every front-end calls (application code, the admin, the commands, the plug-ins).

``runs`` submits, inspects, steers and waits for runs; ``streams`` reads a run's
events and streams while it runs; ``schedules`` manages
cron schedules; ``operations`` serves operator front-ends; ``task_runs``
serves the Django Tasks plug-in. The public names are re-exported here and
from ``durable_django``.
"""

from ..types import Pause
from .attempts import list_attempts
from .forks import fork
from .operations import retry_as_new_run
from .pauses import list_pauses, pause, unpause
from .runs import (
    cancel,
    emit_signal,
    enqueue,
    enqueue_many,
    get_run,
    list_runs,
    purge_finished,
    resume,
    run_id_of,
    wait_for_result,
)
from .schedules import (
    backfill,
    create_schedule,
    fire_schedule_now,
    get_schedule,
    list_schedules,
    schedule,
    schedule_runs,
    set_schedule_enabled,
    unschedule,
)
from .streams import aread_stream, get_event, list_events, read_stream, stream_is_readable

__all__ = [
    "Pause",
    "aread_stream",
    "backfill",
    "cancel",
    "create_schedule",
    "emit_signal",
    "enqueue",
    "enqueue_many",
    "fire_schedule_now",
    "fork",
    "get_event",
    "get_run",
    "get_schedule",
    "list_attempts",
    "list_events",
    "list_pauses",
    "list_runs",
    "list_schedules",
    "pause",
    "purge_finished",
    "read_stream",
    "resume",
    "retry_as_new_run",
    "run_id_of",
    "schedule",
    "schedule_runs",
    "set_schedule_enabled",
    "stream_is_readable",
    "unpause",
    "unschedule",
    "wait_for_result",
]
