-- durable_hold_paused, version 1 (migration 0018).
--
-- Holds the due runs a claim found under a pause (store/claims.py): under the pause keys' advisory locks,
-- taken in one order (by hash) as pause() and unpause() take them, and only while the pause still exists,
-- so an unpause that committed meanwhile never leaves a run held. A due waiting run (its sleep or wait
-- ended) becomes pending, as a signal's wake-up makes it, so it leaves the claim's waits too: its
-- replay decides the wait again from the journal. A held run is out of the claim indexes, so no claim
-- reads it again. Returns no rows: the claim statement calls it as one arm of its result.
CREATE OR REPLACE FUNCTION durable_hold_paused(p_run_ids text[])
RETURNS TABLE (run durable_run, recovered boolean, started boolean, database_now timestamptz,
               due_since timestamptz)
LANGUAGE plpgsql VOLATILE AS $fn$
BEGIN
    IF coalesce(cardinality(p_run_ids), 0) = 0 THEN
        RETURN;
    END IF;
    PERFORM pg_advisory_xact_lock(k.h) FROM (
        SELECT DISTINCT hashtextextended(p.key, 0) AS h
        FROM durable_run r
        JOIN durable_pause p ON p.key IN ('paused:function:' || r.name, 'paused:queue:' || r.queue)
        WHERE r.run_id = ANY (p_run_ids)
        ORDER BY 1
    ) k;
    UPDATE durable_run r SET status = 'pending', held_by = under.key, available_at = NULL, waiting_for = NULL,
        updated_at = now()
    FROM (
        SELECT c.run_id, (
            SELECT p.key FROM durable_pause p
            WHERE p.key IN ('paused:function:' || c.name, 'paused:queue:' || c.queue)
            ORDER BY p.function IS NULL, p.key LIMIT 1) AS key
        FROM durable_run c WHERE c.run_id = ANY (p_run_ids)
    ) under
    WHERE r.run_id = under.run_id AND under.key IS NOT NULL AND r.held_by IS NULL
      AND ((r.status = 'pending' AND (r.available_at IS NULL OR r.available_at <= now()))
           OR (r.status = 'waiting' AND r.available_at <= now()));
END
$fn$;
