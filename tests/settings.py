"""Settings for the test suite: a real PostgreSQL, never SQLite.

DATABASE_URL when set; otherwise an embedded PostgreSQL from pgserver, started
once per test session (worker subprocesses inherit its DATABASE_URL).
"""

import copy
import importlib.util
import json
import os
from typing import Any

import django
import environ

from durable_django.testing import ensure_database_url

env = environ.Env()


def _without_flushes(url: str) -> None:
    """The suite's own embedded server skips fsync and full-page images (PostgreSQL's "non-durable
    settings"): what a test sees of commits, locks and crashes of PostgreSQL's processes is unchanged
    (WAL still reaches the kernel at each commit), and the suite's hundreds of thousands of commits stop
    waiting on the disk. Not for a DATABASE_URL the caller gave: that server is theirs."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute("ALTER SYSTEM SET fsync = off")
        connection.execute("ALTER SYSTEM SET full_page_writes = off")
        connection.execute("SELECT pg_reload_conf()")


if not os.environ.get("DATABASE_URL"):
    _without_flushes(ensure_database_url())

SECRET_KEY = "tests-only"
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
ROOT_URLCONF = "tests.urls"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
DATABASES = {"default": env.db("DATABASE_URL")}
# A second alias with a database of its own on the same server, for DURABLE["DATABASE"] pointing away
# from "default" (tests/admin/test_admin_database.py). pytest-django creates its test database only
# when a collected test asks for it, so other runs do not pay for it.
DATABASES["durable"] = copy.deepcopy(DATABASES["default"])
DATABASES["durable"]["TEST"] = {"NAME": f"test_{DATABASES['default']['NAME']}_durable"}


def mirror(**overrides: Any) -> dict[str, Any]:
    """Another alias on the test database itself (a TEST MIRROR has no database of its own)."""
    return {**copy.deepcopy(DATABASES["default"]), "TEST": {"MIRROR": "default"}, **overrides}


# "direct" reaches PostgreSQL without a pooler (LISTEN_DATABASE behind PgBouncer); a worker subprocess is
# given its URL. "pooled" goes through PgBouncer once the pooled_alias fixture has routed it (tests/pooler).
# "replica" stands in for a read replica (READ_DATABASE, tests/admin/test_admin_replica.py).
DATABASES["direct"] = env.db("DURABLE_TEST_DIRECT_URL") if os.environ.get("DURABLE_TEST_DIRECT_URL") else mirror()
DATABASES["pooled"] = mirror(DISABLE_SERVER_SIDE_CURSORS=True)
DATABASES["replica"] = mirror()

# DURABLE_TEST_PGBOUNCER=1 (tox -e pgbouncer): "default" reaches PostgreSQL through PgBouncer in transaction
# mode. The test process routes it there once the test databases exist (tests/conftest.py); a worker
# subprocess gets the PgBouncer URL as DATABASE_URL. As Django asks behind such a pooler, server-side
# cursors are off, and LISTEN goes to "direct" unless DURABLE_TEST_LISTEN_DATABASE says otherwise ("": none).
BEHIND_PGBOUNCER = os.environ.get("DURABLE_TEST_PGBOUNCER") == "1"
if BEHIND_PGBOUNCER:
    DATABASES["default"]["DISABLE_SERVER_SIDE_CURSORS"] = True
LISTEN_DATABASE = os.environ.get("DURABLE_TEST_LISTEN_DATABASE", "direct" if BEHIND_PGBOUNCER else "")

if os.environ.get("DURABLE_TEST_HANDLER_POOL"):
    # Django's connection pool on "default", at most this many connections (tests/process/test_connections.py).
    DATABASES["default"]["OPTIONS"]["pool"] = {
        "min_size": 0,
        "max_size": int(os.environ["DURABLE_TEST_HANDLER_POOL"]),
        "timeout": 120,
    }

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "durable_django",
    "tests.workflows",
]
if importlib.util.find_spec("django_celery_beat") is not None:
    # durable_import_celery_beat is tested against the real package's tables (tox installs it beside Django 5.2;
    # it does not support Django 6.1).
    INSTALLED_APPS.append("django_celery_beat")
if django.VERSION < (6, 0):
    INSTALLED_APPS.append("django_tasks")  # the Tasks framework backport (django.tasks from Django 6)
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
STATIC_URL = "/static/"
# The admin tests log a user in for each test: a password hash that costs nothing (never in production).
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

# Short leases so fault tests (SIGKILL, SIGSTOP) see expiry in seconds.
DURABLE = {
    "LEASE_SECONDS": float(os.environ.get("DURABLE_TEST_LEASE_SECONDS", "30")),
    "POLL_SECONDS": float(os.environ.get("DURABLE_TEST_POLL_SECONDS", "5")),
    "DEFAULT_RETRY": {"max_attempts": 3, "initial_delay": 0.05, "max_delay": 0.2, "backoff": 2.0, "jitter": 0.0},
    "MAX_RECOVERIES": int(os.environ.get("DURABLE_TEST_MAX_RECOVERIES", "10")),
    **({"LISTEN_DATABASE": LISTEN_DATABASE} if LISTEN_DATABASE else {}),
    # Schedules declared in settings, as JSON, for a worker process (tests/process/test_worker_lines.py).
    **(
        {"SCHEDULES": json.loads(os.environ["DURABLE_TEST_SCHEDULES"])}
        if os.environ.get("DURABLE_TEST_SCHEDULES")
        else {}
    ),
    # A worker's metrics port on another address than the default (tests/process/test_metrics_port.py).
    **(
        {"METRICS_ADDRESS": os.environ["DURABLE_TEST_METRICS_ADDRESS"]}
        if os.environ.get("DURABLE_TEST_METRICS_ADDRESS")
        else {}
    ),
}

# Django Tasks on durable runs (fixture tasks: tests/workflows/tasks.py), retried as fast as DEFAULT_RETRY.
TASKS = {
    "default": {
        "BACKEND": "durable_django.tasks.DurableBackend",
        "QUEUES": ["default", "reports"],
        "OPTIONS": {
            "retry": {"max_attempts": 3, "initial_delay": 0.05, "max_delay": 0.2, "backoff": 2.0, "jitter": 0.0}
        },
    }
}

CONSOLE: dict[str, str] = {"class": "logging.StreamHandler"}
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": CONSOLE},
    "loggers": {
        "durable_django": {"handlers": ["console"], "level": os.environ.get("DURABLE_TEST_LOG_LEVEL", "WARNING")}
    },
}
if os.environ.get("DURABLE_TEST_LOG_TIMES"):
    # Timestamps, to line a worker's log up with the faults a test injects (tests/chaos).
    LOGGING["formatters"] = {"timed": {"format": "%(asctime)s %(levelname)s %(threadName)s %(name)s: %(message)s"}}
    CONSOLE["formatter"] = "timed"

# A worker started with DURABLE_TEST_SPANS_FILE exports its spans to that file (tests/spans.py).
if os.environ.get("DURABLE_TEST_SPANS_FILE"):
    from tests.spans import export_to_file

    export_to_file(os.environ["DURABLE_TEST_SPANS_FILE"])
