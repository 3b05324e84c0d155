"""Spawning children: inserting them and journalling their ids in the held run's transaction.

Replay adopts the children the first attempt made: a child's idempotency key
is made by the engine from the parent and the step, and a spawn made under the
held run's lock is committed with its journal entry or not at all.
"""

from __future__ import annotations

from typing import Any

from .. import faults
from . import inserts, journal, runs
from .db import cursor

# A run that spawned a child lands through the full landing statement from then on.
MARK_PARENT = "UPDATE durable_run SET has_children = true WHERE run_id = %s AND NOT has_children"


def spawn(run_id: str, token: int, step_id: str, child_params: dict[str, Any]) -> str:
    """Insert a child and journal its id in one transaction; replay adopts the same child."""
    with journal.held_transaction(), cursor() as cur:
        journal.lock_held(cur, run_id, token)
        stored = journal.stored_step(cur, run_id, step_id)
        if stored is not None:
            journalled_id: str = stored[0]
            return journalled_id
        child = inserts.insert_run(child_params) or runs.find_by_idempotency_key(child_params["idempotency_key"])
        # The insert conflicts only on the child's engine-made idempotency key (spawn() refuses a coalesce
        # key), and that child, made under this held run's lock, is committed and cannot be purged while
        # its parent is live: the lookup finds it.
        assert child is not None, "the key that refused the insert names a stored child"
        cur.execute(MARK_PARENT, [run_id])
        child_id: str = journal.insert_step(cur, run_id, step_id, child_params["tenant_id"], child.run_id)
        return child_id


def spawn_many(run_id: str, token: int, step_id: str, params: dict[str, Any], positions: list[int]) -> list[str]:
    """Insert a batch of children in one statement and journal their ids in one transaction; replay adopts them.

    Args:
        params: the batch's insert parameters (store.inserts.INSERT_MANY), every child keyed by the engine.
        positions: for each input, the index of its child in the batch.

    Returns:
        The children's run ids, one per input, in input order.
    """
    with journal.held_transaction(), cursor() as cur:
        _cancel, tenant_id = journal.lock_held(cur, run_id, token)
        stored = journal.stored_step(cur, run_id, step_id)
        if stored is not None:
            journalled: list[str] = stored[0]
            return journalled
        inserted = inserts.insert_many(params)
        faults.reach("spawn_many.inserted")
        made, keys = params["run_ids"], params["idempotency_keys"]
        # As for spawn(): a key that refused its row names a child made under this held run's lock.
        refused = [key for child_id, key in zip(made, keys, strict=True) if child_id not in inserted]
        found = runs.find_by_idempotency_keys(refused) if refused else {}
        children = [
            child_id if child_id in inserted else found[key].run_id for child_id, key in zip(made, keys, strict=True)
        ]
        cur.execute(MARK_PARENT, [run_id])
        child_ids: list[str] = journal.insert_step(
            cur, run_id, step_id, tenant_id, [children[index] for index in positions]
        )
        return child_ids
