"""The admin: where operators watch and steer durable work (registered under "Durable execution").

``runs``, ``schedules``, ``workers`` and ``pauses`` are the pages, built on ``base`` (the durable
alias, NUL-safe lookups), ``filters``, ``pagination`` and ``display``;
``operations`` holds what an operator action is (each a call to the client API after a
confirmation page), ``run_operations``, ``control`` and ``schedule_operations`` the actions
themselves, and ``run_page`` a run's bounded page.
"""

from .pauses import PauseAdmin
from .runs import RunAdmin
from .schedules import ScheduleAdmin
from .workers import WorkerAdmin

__all__ = ["PauseAdmin", "RunAdmin", "ScheduleAdmin", "WorkerAdmin"]
