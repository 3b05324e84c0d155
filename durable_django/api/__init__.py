"""The client API: what every front-end calls (application code, the admin, the commands, the plug-ins).

``runs`` submits, inspects, steers and waits for runs; ``schedules`` manages
cron schedules; ``operations`` serves operator front-ends; ``task_runs``
serves the Django Tasks plug-in. The public names are re-exported here and
from ``durable_django``.
"""

from .operations import retry_as_new_run
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
    create_schedule,
    fire_schedule_now,
    get_schedule,
    list_schedules,
    schedule,
    set_schedule_enabled,
    unschedule,
)

__all__ = [
    "cancel",
    "create_schedule",
    "emit_signal",
    "enqueue",
    "enqueue_many",
    "fire_schedule_now",
    "get_run",
    "get_schedule",
    "list_runs",
    "list_schedules",
    "purge_finished",
    "resume",
    "retry_as_new_run",
    "run_id_of",
    "schedule",
    "set_schedule_enabled",
    "unschedule",
    "wait_for_result",
]
