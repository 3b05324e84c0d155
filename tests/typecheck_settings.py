"""The settings mypy's Django plugin loads: the test settings, without starting a server.

The plugin imports its settings module to learn the installed apps, and mypy leaves
through ``os._exit``, so an embedded PostgreSQL started at that import (tests/settings.py
starts one when DATABASE_URL is unset) would outlive the check with its data directory.
No connection is made while type checking, so a URL that names no server is enough.
"""

import os

os.environ.setdefault("DATABASE_URL", "postgres://typecheck@localhost:1/not-connected")

from tests.settings import *  # noqa: F403
