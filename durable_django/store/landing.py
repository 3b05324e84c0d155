"""Landing: the one statement that ends runs and does what must follow in the same transaction.

A run that lands terminal wakes its parent if the parent waits for it, and its
unfinished descendants are cancelled by the rule of ``cancel()`` (pending or
waiting: cancelled; running: cancel requested; past a pivot: refused). A
pivoted waiting descendant whose awaited child is cancelled is woken. Listeners
hear ``durable_done`` for every run that landed and workers ``durable_wake``
for every run made pending. Each caller supplies the ``landed`` UPDATE, which
must return (run_id, parent_run_id, status, queue, cascade).
"""

from .db import DONE_CHANNEL, WAKE_CHANNEL

_TERMINAL = "('succeeded', 'failed', 'cancelled')"
_LIVE = "('pending', 'running', 'waiting')"

LANDING_TEMPLATE = f"""
WITH RECURSIVE landed AS (
    {{landed}}
),
woken AS (
    UPDATE durable_run p
    SET status = 'pending', waiting_for = NULL, available_at = NULL, updated_at = now()
    FROM landed
    WHERE p.run_id = landed.parent_run_id
      AND landed.status IN {_TERMINAL}
      AND p.status = 'waiting'
      AND p.waiting_for = 'child:' || landed.run_id
    RETURNING p.queue
),
tree AS (
    SELECT c.run_id FROM durable_run c JOIN landed ON c.parent_run_id = landed.run_id WHERE landed.cascade
    UNION ALL
    SELECT c.run_id FROM durable_run c JOIN tree ON c.parent_run_id = tree.run_id
),
targets AS (
    SELECT d.run_id, d.pivoted_at IS NOT NULL AS pivoted,
           d.pivoted_at IS NULL AND d.status IN ('pending', 'waiting') AS ends
    FROM durable_run d JOIN tree USING (run_id)
    WHERE d.status IN {_LIVE}
),
cascaded AS (
    UPDATE durable_run d SET
        status = CASE
            WHEN t.ends THEN 'cancelled'
            WHEN t.pivoted AND d.status = 'waiting' AND d.waiting_for IN (
                SELECT 'child:' || x.run_id FROM targets x WHERE x.ends) THEN 'pending'
            ELSE d.status END,
        cancel_requested_at = CASE WHEN t.pivoted THEN d.cancel_requested_at
                                   ELSE coalesce(d.cancel_requested_at, now()) END,
        cancel_refused_at = CASE WHEN t.pivoted THEN coalesce(d.cancel_refused_at, now())
                                 ELSE d.cancel_refused_at END,
        finished_at = CASE WHEN t.ends THEN now() ELSE d.finished_at END,
        waiting_for = CASE WHEN t.ends OR (t.pivoted AND d.status = 'waiting' AND d.waiting_for IN (
                SELECT 'child:' || x.run_id FROM targets x WHERE x.ends)) THEN NULL ELSE d.waiting_for END,
        available_at = CASE WHEN t.ends THEN NULL ELSE d.available_at END,
        updated_at = CASE WHEN t.pivoted THEN d.updated_at ELSE now() END
    FROM targets t
    WHERE d.run_id = t.run_id AND d.status IN {_LIVE}
    RETURNING d.run_id, d.status, d.queue
),
notes AS (
    SELECT pg_notify('{DONE_CHANNEL}', run_id) FROM landed WHERE status IN {_TERMINAL}
    UNION ALL
    SELECT pg_notify('{DONE_CHANNEL}', run_id) FROM cascaded WHERE status = 'cancelled'
    UNION ALL
    SELECT pg_notify('{WAKE_CHANNEL}', queue) FROM (
        SELECT queue FROM woken UNION SELECT queue FROM cascaded WHERE status = 'pending') q
)
SELECT landed.run_id, landed.status, (SELECT count(*) FROM notes), (SELECT count(*) FROM cascaded)
FROM landed
"""


def landing_sql(landed_update: str) -> str:
    """The landing statement around one ``UPDATE durable_run ... RETURNING`` of the caller."""
    return LANDING_TEMPLATE.replace("{landed}", landed_update)
