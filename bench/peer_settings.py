"""Django settings for the django-tasks-db peer (imported in the peers' own venv only)."""

import os

import psycopg

_info = psycopg.conninfo.conninfo_to_dict(os.environ["DATABASE_URL"])
SECRET_KEY = "bench-peers-only"
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": _info.get("dbname"),
        "USER": _info.get("user"),
        "PASSWORD": _info.get("password", ""),
        "HOST": _info.get("host", ""),
        "PORT": _info.get("port", ""),
        # Persistent connections: without them db_worker opens a connection for every task.
        "CONN_MAX_AGE": None,
    }
}
INSTALLED_APPS = ["django_tasks", "django_tasks_db"]
TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "root": {"level": "WARNING"},
    "loggers": {"django_tasks": {"level": "WARNING"}, "django_tasks_db": {"level": "WARNING"}},
}
