"""The no-op workload for the task-queue peers: a django-tasks task and a procrastinate app with one task."""

import os

from procrastinate import App, PsycopgConnector

# procrastinate's docs: a pool as large as the worker's concurrency plus one when jobs are short
# (bench.peers sets PROCRASTINATE_POOL_SIZE to it); psycopg_pool's default is 4.
_pool_size = int(os.environ.get("PROCRASTINATE_POOL_SIZE", "4"))
app = App(
    connector=PsycopgConnector(
        conninfo=os.environ.get("DATABASE_URL", ""), min_size=min(4, _pool_size), max_size=_pool_size
    )
)


@app.task(name="noop")
def procrastinate_noop():
    """A plain function (the worker runs it in a thread): here it drains faster than an async one in every layout."""
    return None


def django_noop():
    return None


if os.environ.get("DJANGO_SETTINGS_MODULE") == "bench.peer_settings":
    from django_tasks import task

    django_noop = task()(django_noop)
