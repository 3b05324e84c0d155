"""Settings of the harness adapter's Django project: durable_django and the one function it runs.

DATABASE_URL is the harness's (it creates the database); everything else is durable_django's defaults.
"""

import environ

env = environ.Env()

SECRET_KEY = "bench-only"
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
DATABASES = {"default": env.db("DATABASE_URL")}
INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "durable_django",
    "bench.harness",
]

# Warnings only, as in every benchmark here: per-run log lines would dominate a no-op's cost.
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"durable_django": {"handlers": ["console"], "level": "WARNING"}},
}
