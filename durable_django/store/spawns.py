"""Spawning children: inserting them and journalling their ids in the held run's transaction.

Replay adopts the children the first attempt made: a child's idempotency key
is made by the engine from the parent and the step, and a spawn made under the
held run's lock is committed with its journal entry or not at all.
"""

from __future__ import annotations

from .. import faults
from ..submission import BatchRequest, SubmitRequest
from . import inserts, journal, runs
from .db import cursor

# A run that spawned a child lands through the full landing statement from then on.
MARK_PARENT = "UPDATE durable_run SET has_children = true WHERE run_id = %s AND NOT has_children"


def spawn(run_id: str, token: int, step_id: str, child: SubmitRequest) -> str:
    """Insert a child and journal its id in one transaction; replay adopts the same child."""
    with journal.held_transaction(), cursor() as cur:
        journal.lock_held(cur, run_id, token)
        stored = journal.stored_step(cur, run_id, step_id)
        if stored is not None:
            journalled_id: str = stored[0]
            return journalled_id
        assert child.idempotency_key is not None, "a child is keyed by the engine"
        stored_child = inserts.insert_run(child) or runs.find_by_idempotency_key(child.idempotency_key)
        # The insert conflicts only on the child's engine-made idempotency key (spawn() refuses a coalesce
        # key), and that child, made under this held run's lock, is committed and cannot be purged while
        # its parent is live: the lookup finds it.
        assert stored_child is not None, "the key that refused the insert names a stored child"
        cur.execute(MARK_PARENT, [run_id])
        child_id: str = journal.insert_step(cur, run_id, step_id, child.template.tenant_id, stored_child.run_id)
        return child_id


def spawn_many(run_id: str, token: int, step_id: str, batch: BatchRequest) -> list[str]:
    """Insert a batch of children in one statement and journal their ids in one transaction; replay adopts them.

    Args:
        batch: the children, every one keyed by the engine.

    Returns:
        The children's run ids, one per input, in input order.
    """
    with journal.held_transaction(), cursor() as cur:
        _cancel, tenant_id = journal.lock_held(cur, run_id, token)
        stored = journal.stored_step(cur, run_id, step_id)
        if stored is not None:
            journalled: list[str] = stored[0]
            return journalled
        inserted = inserts.insert_many(batch)
        faults.reach("spawn_many.inserted")
        made, keys = batch.run_ids, batch.idempotency_keys
        # As for spawn(): a key that refused its row names a child made under this held run's lock.
        refused = [key for child_id, key in zip(made, keys, strict=True) if child_id not in inserted]
        found = runs.find_by_idempotency_keys([key for key in refused if key is not None]) if refused else {}
        children = [
            child_id if child_id in inserted else found[str(key)].run_id
            for child_id, key in zip(made, keys, strict=True)
        ]
        cur.execute(MARK_PARENT, [run_id])
        child_ids: list[str] = journal.insert_step(
            cur, run_id, step_id, tenant_id, [children[index] for index in batch.positions]
        )
        return child_ids
