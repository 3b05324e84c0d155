"""Sessions of the store's own, outside Django's connections: LISTEN, and waiting for a run to land."""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from django.core.exceptions import ImproperlyConfigured
from django.db import connections

from ..conf import durable_settings
from . import pool
from .db import DONE_CHANNEL


def session_connection_params(alias: str) -> dict[str, Any]:
    """psycopg.connect() arguments for a session of its own on ``alias``, preparing only where that is safe."""
    params = connections[alias].get_connection_params()
    for django_only in ("cursor_factory", "context", "prepare_threshold"):
        params.pop(django_only, None)
    if not durable_settings.prepares_statements(alias):
        params["prepare_threshold"] = None  # psycopg prepares a query it sees five times, by default
    return {**params, **pool.session_name()}


@contextmanager
def session(alias: str) -> Iterator[psycopg.Connection[tuple[Any, ...]]]:
    """A dedicated autocommit session on ``alias``, outside any transaction of the caller's."""
    with psycopg.connect(**session_connection_params(alias), autocommit=True) as conn:
        yield conn


@contextmanager
def listening(channels: Iterable[str]) -> Iterator[psycopg.Connection[tuple[Any, ...]]]:
    """A dedicated autocommit session that LISTENs on ``channels``; iterate ``conn.notifies()``.

    Raises:
        ImproperlyConfigured: the durable alias goes through a transaction pooler and no
            ``LISTEN_DATABASE`` bypasses it; callers poll instead (``durable_settings.listen_database``).
    """
    alias = durable_settings.listen_database
    if alias is None:
        raise ImproperlyConfigured(
            f"DURABLE['DATABASE'] {durable_settings.DATABASE!r} goes through a transaction pooler "
            "(DISABLE_SERVER_SIDE_CURSORS), where LISTEN is lost: set DURABLE['LISTEN_DATABASE'] "
            "to an alias that reaches PostgreSQL directly"
        )
    with session(alias) as conn:
        for channel in channels:
            conn.execute(f'LISTEN "{channel}"')
        yield conn


class LandingWatch:
    """Waits for a run to land: woken by the ``durable_done`` NOTIFY, or by polling where LISTEN is lost.

    ``session`` reads what is committed, outside the caller's transaction. Behind
    a transaction pooler with no ``LISTEN_DATABASE`` it polls, from every 50 ms
    up to every ``POLL_SECONDS``, so a short run is seen soon and a long wait
    costs little.
    """

    FIRST_POLL_SECONDS = 0.05

    def __init__(self, session: psycopg.Connection[tuple[Any, ...]], *, listening: bool) -> None:
        self.session = session
        self.listening = listening
        self._poll = self.FIRST_POLL_SECONDS

    def wait(self, run_id: str, timeout: float) -> None:
        """Return when ``run_id``'s landing is announced, at the next poll, or after ``timeout`` seconds."""
        if not self.listening:
            time.sleep(min(timeout, self._poll))
            self._poll = min(self._poll * 2, float(durable_settings.POLL_SECONDS))
            return
        for notify in self.session.notifies(timeout=timeout):
            if notify.payload == run_id:
                return


@contextmanager
def watching_landings() -> Iterator[LandingWatch]:
    """A session that hears landed runs announced (LISTEN subscribes before the caller reads), or polls."""
    if durable_settings.listen_database is None:
        with session(durable_settings.DATABASE) as conn:
            yield LandingWatch(conn, listening=False)
        return
    with listening([DONE_CHANNEL]) as conn:
        yield LandingWatch(conn, listening=True)
