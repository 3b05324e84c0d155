-- durable_release_held, version 1 (migration 0006).
--
-- Release, under the keys' locks, the first runs each key holds (as many as slots it freed), and wake
-- the workers of their queues. Returns how many were released.
CREATE OR REPLACE FUNCTION durable_release_held(p_reasons text[], p_counts int[], p_channel text)
RETURNS int
LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
    v_queues text[];
BEGIN
    IF coalesce(cardinality(p_reasons), 0) = 0 THEN
        RETURN 0;
    END IF;
    PERFORM pg_advisory_xact_lock(lk.h) FROM (
        SELECT DISTINCT hashtextextended(k, 0) AS h FROM unnest(p_reasons) AS k ORDER BY 1
    ) lk;
    WITH released AS (
        UPDATE durable_run r SET held_by = NULL
        WHERE r.run_id IN (
            SELECT x.run_id FROM unnest(p_reasons, p_counts) AS f(reason, n)
            CROSS JOIN LATERAL (
                SELECT h.run_id FROM durable_run h
                WHERE h.status = 'pending' AND h.held_by = f.reason
                ORDER BY h.priority DESC, h.created_at
                LIMIT f.n
                FOR UPDATE SKIP LOCKED
            ) x
        )
        RETURNING r.queue
    )
    SELECT array_agg(queue) INTO v_queues FROM released;
    PERFORM pg_notify(p_channel, q) FROM (SELECT DISTINCT unnest(v_queues) AS q) wq;
    RETURN coalesce(cardinality(v_queues), 0);
END
$fn$;
