"""Settings for the benchmarks: the durable app plus the ``bench`` app with no-op functions.

DATABASE_URL when set; otherwise an embedded PostgreSQL (pgserver) started by the
process that imports this first; worker subprocesses inherit its DATABASE_URL.
"""

import os

import django
import environ

from durable_django.testing import ensure_database_url

env = environ.Env()
ensure_database_url()

SECRET_KEY = "bench-only"
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
DATABASES = {"default": env.db("DATABASE_URL")}
# bench_big.py's small tables: a database of their own on the same server, created by that benchmark.
DATABASES["small"] = {**DATABASES["default"], "NAME": f"{DATABASES['default']['NAME']}_bench_small"}
INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "durable_django",
    "bench",
]
if django.VERSION < (6, 0):
    INSTALLED_APPS.append("django_tasks")

# bench_big.py times the admin's pages through Django's test client.
ROOT_URLCONF = "bench.urls"
ALLOWED_HOSTS = ["testserver"]
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

# Metrics (bench_observability.py) are served on the loopback only.
DURABLE = {
    "POLL_SECONDS": float(os.environ.get("BENCH_POLL_SECONDS", "5")),
    "METRICS_ADDRESS": "127.0.0.1",
    # bench_bloat.py's sustained load renews leases often.
    "LEASE_SECONDS": float(os.environ.get("BENCH_LEASE_SECONDS", "30")),
}

# Warnings only, in every system measured: per-run log lines would dominate a no-op's cost.
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"durable_django": {"handlers": ["console"], "level": "WARNING"}},
}

# bench_observability.py's instrumented worker: the OpenTelemetry SDK with a batch processor (bench/tracing.py).
if os.environ.get("BENCH_OTEL_SPANS_FILE"):
    from bench.tracing import install

    install(os.environ["BENCH_OTEL_SPANS_FILE"])
