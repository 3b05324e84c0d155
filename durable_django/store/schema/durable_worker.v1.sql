-- The durable_worker table, version 1 (migration 0007). Created by hand: a text primary key made by Django
-- gets a text_pattern_ops index beside it (see migration 0002), which nobody's LIKE query needs.
CREATE TABLE durable_worker (
    worker_id text PRIMARY KEY,
    host text NOT NULL,
    pid integer NOT NULL,
    queues jsonb,
    functions jsonb NOT NULL,
    tenant_id uuid,
    concurrency integer NOT NULL,
    started_at timestamp with time zone NOT NULL DEFAULT now(),
    last_seen_at timestamp with time zone NOT NULL DEFAULT now(),
    stopped_at timestamp with time zone
)
