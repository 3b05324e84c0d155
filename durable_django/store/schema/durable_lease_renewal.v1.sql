-- The durable_lease_renewal table, version 1 (migration 0015): leases renewed while a client transaction
-- holds the run's row lock (store/leases.py). Created by hand: a text primary key made by Django gets a
-- text_pattern_ops index beside it (see migration 0002).
CREATE TABLE durable_lease_renewal (
    run_id text PRIMARY KEY,
    token integer NOT NULL,
    leased_until timestamp with time zone NOT NULL
)
