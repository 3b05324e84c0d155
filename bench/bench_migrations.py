"""``migrate`` of durable_django on an empty database: the squashed migration against the 22 it replaces.

Each round makes two fresh databases on the benchmark server and migrates one by the squash (as a new install
does) and the other by the replaced chain (as an install made before the squash did), in alternating order;
the medians are compared. It is the part of a test run's database set-up that durable_django's migrations take.
"""

from __future__ import annotations

import copy
import statistics
import time
import uuid

from bench import common

APP = "durable_django"


def migrate_fresh_database(*, squash: bool) -> float:
    """Seconds to migrate the app on a new, empty database (dropped afterwards)."""
    from django.db import connections
    from django.db.migrations.executor import MigrationExecutor
    from django.db.migrations.loader import MigrationLoader
    from django.db.utils import load_backend

    name = f"bench_migrate_{uuid.uuid4().hex[:10]}"
    with common.raw_connect() as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    settings = copy.deepcopy(connections["default"].settings_dict)
    settings["NAME"] = name
    alias = name
    wrapper = load_backend(settings["ENGINE"]).DatabaseWrapper(settings, alias=alias)
    # Registered under its alias: the schema editor's atomic blocks look it up there.
    connections.settings[alias] = settings
    connections[alias] = wrapper
    try:
        started = time.perf_counter()
        executor = MigrationExecutor(wrapper)
        if not squash:
            executor.loader = MigrationLoader(wrapper, replace_migrations=False)
        replacements = executor.loader.replacements
        (leaf,) = [node for node in executor.loader.graph.leaf_nodes(APP) if squash or node not in replacements]
        executor.migrate([leaf])
        return time.perf_counter() - started
    finally:
        wrapper.close()
        del connections[alias]
        del connections.settings[alias]
        with common.raw_connect() as conn:
            conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


def main(rounds: int) -> None:
    print(f"\n== migrate on an empty database: the squash vs the chain it replaces, {rounds} rounds", flush=True)
    times: dict[bool, list[float]] = {True: [], False: []}
    for round_ in range(rounds):
        for squash in (True, False) if round_ % 2 == 0 else (False, True):
            times[squash].append(migrate_fresh_database(squash=squash))
    squash, chain = statistics.median(times[True]), statistics.median(times[False])
    common.record(
        "migrate durable_django, empty database",
        f"squash {squash:.2f}s, chain {chain:.2f}s (medians)",
        f"chain/squash {chain / squash:.2f}x",
    )
