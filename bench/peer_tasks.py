"""The no-op workload for the peers: a django-tasks task and a procrastinate app with one task."""

import os

from procrastinate import App, PsycopgConnector

app = App(connector=PsycopgConnector(conninfo=os.environ.get("DATABASE_URL", "")))


@app.task(name="noop")
def procrastinate_noop():
    return None


def django_noop():
    return None


if os.environ.get("DJANGO_SETTINGS_MODULE") == "bench.peer_settings":
    from django_tasks import task

    django_noop = task()(django_noop)
