"""The admin: where operators watch and steer durable work (registered under "Durable execution").

``runs``, ``schedules``, ``workers`` and ``pauses`` are the pages, built on ``base`` (the durable
alias, NUL-safe lookups), ``filters``, ``pagination`` and ``display``;
``operations`` holds what an operator can do, each a call to the client API
after a confirmation page, and ``run_page`` a run's bounded page.
"""

from .pauses import PauseAdmin
from .runs import RunAdmin
from .schedules import ScheduleAdmin
from .workers import WorkerAdmin

__all__ = ["PauseAdmin", "RunAdmin", "ScheduleAdmin", "WorkerAdmin"]
