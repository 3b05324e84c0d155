"""Reading flow control as an operator sees it: what each limit key holds back and what runs under it.

Bounded reads (a capped number of held runs), for the admin's limits panel and
the reconciler; this module writes nothing (see .importlinter).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..flow_control import QUEUE_CONCURRENCY_PREFIX
from .db import cursor

# What a limit key holds back and what runs under it now: a function's or queue's concurrency key
# counts the runs holding its slots, a rate key the runs it limits that are running.
_RUNNING_UNDER = f"""CASE
    WHEN key LIKE '{QUEUE_CONCURRENCY_PREFIX}%%' OR key LIKE 'rate:queue:%%' THEN (
        SELECT count(*) FROM durable_run
        WHERE status = 'running' AND queue = regexp_replace(key, '^(concurrency|rate):queue:', ''))
    WHEN key LIKE 'concurrency:%%' THEN (
        SELECT count(*) FROM durable_run
        WHERE concurrency_key = key AND concurrency_key IS NOT NULL
          AND (status = 'running' OR (concurrency_while_waiting AND started_at IS NOT NULL
                                      AND status = ANY (ARRAY['pending', 'waiting']))))
    ELSE (SELECT count(*) FROM durable_run WHERE status = 'running' AND rate_key = key) END"""

# The keys holding most runs back, each with how many it holds and how many run under it now.
HELD_BY_KEY = f"""
WITH held AS (
    SELECT held_by AS key, count(*) AS held FROM (
        SELECT held_by FROM durable_run WHERE status = 'pending' AND held_by IS NOT NULL
        ORDER BY held_by LIMIT %(cap)s
    ) h
    GROUP BY held_by
    ORDER BY count(*) DESC, held_by
    LIMIT %(keys)s
)
SELECT key, held, {_RUNNING_UNDER} FROM held
"""

# One key's runs held back and runs under it now.
KEY_STATE = f"""
SELECT (SELECT count(*) FROM durable_run WHERE status = 'pending' AND held_by = key), {_RUNNING_UNDER}
FROM (SELECT %(key)s::text AS key) k
"""


@dataclass(frozen=True, slots=True)
class LimitState:
    """A limit key as an operator sees it: the due runs it holds back and the runs under it now."""

    key: str
    held: int
    running: int


def held_by_key(*, cap: int = 10_000, keys: int = 20, using: str | None = None) -> list[LimitState]:
    """The keys holding most runs back, most first; at most ``keys`` of them.

    At most ``cap`` held runs are read (a key's count is then a floor), so it
    costs the same whatever the table holds. ``using``: the alias to read from
    (a replica); the durable alias by default.
    """
    with cursor(using) as cur:
        cur.execute(HELD_BY_KEY, {"cap": cap, "keys": keys})
        return [LimitState(key, held, running) for key, held, running in cur.fetchall()]


def key_state(key: str) -> LimitState:
    """How many runs ``key`` holds back and how many run under it now."""
    with cursor() as cur:
        cur.execute(KEY_STATE, {"key": key})
        held, running = cur.fetchone()
    return LimitState(key, held, running)
