"""Settings of the example shop, read from the environment with django-environ.

``DATABASE_URL`` names the PostgreSQL to use. When it is unset, an embedded
PostgreSQL (the ``pgserver`` package) is started with its data in
``example_project/.pgdata/``, kept between runs so the admin shows what the
demo did; it stops when the last process using it exits.

The knobs below default to production-like values (a 30-second lease, two days
to approve an order); ``demo.py`` shortens them through the same variables.
"""

from pathlib import Path

import django
import environ

from durable_django.testing import ensure_database_url

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()
environ.Env.read_env(BASE_DIR / ".env")  # optional local overrides; real variables win

ensure_database_url(str(BASE_DIR / ".pgdata"), keep=True)
DATABASES = {"default": env.db("DATABASE_URL")}

SECRET_KEY = env("SECRET_KEY", default="example-project-only-never-use-in-production")
DEBUG = env.bool("DEBUG", default=True)
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["localhost", "127.0.0.1", "[::1]"])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "durable_django",
    "shop",
]
if django.VERSION < (6, 0):
    INSTALLED_APPS.append("django_tasks")  # the Tasks framework's backport (Django 6 ships django.tasks)
MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]
ROOT_URLCONF = "shopsite.urls"
WSGI_APPLICATION = "shopsite.wsgi.application"
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
STATIC_URL = "static/"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
USE_TZ = True
TIME_ZONE = "UTC"
LANGUAGE_CODE = "en-us"

DURABLE = {
    # A worker that dies is replaced after at most one lease; the demo uses 3 seconds.
    "LEASE_SECONDS": env.float("DURABLE_LEASE_SECONDS", default=30.0),
    "POLL_SECONDS": env.float("DURABLE_POLL_SECONDS", default=5.0),
    # Synced by every worker when it starts (docs/schedules.md).
    "SCHEDULES": {
        "nightly-report": {
            "name": "shop.nightly_report",
            "cron": "0 2 * * *",
            "tz": env("SHOP_TIME_ZONE", default="Europe/London"),
            "input": {"to": "ops@shop.example"},
        },
    },
}

# Django's Tasks framework (@task in shop/tasks.py) runs on durable_django's worker.
TASKS = {"default": {"BACKEND": "durable_django.tasks.DurableBackend"}}

# The shop's own knobs, in seconds.
SHOP = {
    # How long an order waits for a person to approve it before it is refunded.
    "APPROVAL_TIMEOUT": env.float("SHOP_APPROVAL_TIMEOUT_SECONDS", default=2 * 24 * 3600.0),
    # How long after shipping the follow-up email goes out.
    "FOLLOW_UP_DELAY": env.float("SHOP_FOLLOW_UP_DELAY_SECONDS", default=3 * 24 * 3600.0),
    # How long the fake payment gateway takes to answer after it has charged a card.
    "GATEWAY_LATENCY": env.float("SHOP_GATEWAY_LATENCY_SECONDS", default=0.0),
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "loggers": {"durable_django": {"handlers": ["console"], "level": env("DURABLE_LOG_LEVEL", default="INFO")}},
}
