-- durable_attempt_ended, version 1 (migration 0017): the trigger function and its trigger on durable_run.
--
-- Every attempt's end is written by the very UPDATE that takes its run out of ``running`` (or reclaims it
-- under a new fence token), so the record can never disagree with the run: whichever statement ends an
-- attempt (a batched landing, a failure, a suspension, a release at shutdown, a cancel, a deadline, the
-- reclaim of a dead worker's run, the reconciler) writes it in the same statement, under the same fence.
-- The trigger's WHEN clause is tested in C before any function is called, so renewals, starts and every
-- other update of a running run cost nothing more. The outcome follows from the transition:
--   running -> running under a new token: lost (the reclaiming claim ends it);
--   -> succeeded, cancelled: so; -> failed: failed, or lost when the reconciler fails a run left
--   running long past its lease (RecoveriesExhausted); an AttemptTimedOut error: timed_out;
--   -> pending: retrying when it counted a failure, else released (handed back at shutdown);
--   -> waiting: suspended, or failed when the failure parked the run.
CREATE FUNCTION durable_attempt_ended() RETURNS trigger LANGUAGE plpgsql AS $fn$
DECLARE
    v_outcome text;
    v_wrote_error boolean := NEW.error IS DISTINCT FROM OLD.error OR NEW.failures <> OLD.failures;
    v_error text := CASE WHEN v_wrote_error THEN NEW.error END;
    v_error_type text := CASE WHEN v_wrote_error THEN NEW.error_type END;
BEGIN
    IF NEW.status = 'running' THEN
        v_outcome := 'lost';
        v_error := format('the lease of attempt %s (worker %s) ran out at %s; attempt %s took the run over',
                          OLD.attempts, coalesce(OLD.worker_id, 'unknown'), OLD.leased_until, NEW.attempts);
        v_error_type := 'durable_django.exceptions.LeaseLost';
    ELSIF v_error_type = 'durable_django.exceptions.AttemptTimedOut' THEN
        v_outcome := 'timed_out';
    ELSIF NEW.status IN ('succeeded', 'cancelled') THEN
        v_outcome := NEW.status;
    ELSIF NEW.status = 'failed' THEN
        v_outcome := CASE WHEN v_error_type = 'durable_django.exceptions.RecoveriesExhausted'
                               AND OLD.leased_until < now() THEN 'lost' ELSE 'failed' END;
    ELSIF NEW.status = 'pending' THEN
        v_outcome := CASE WHEN NEW.failures > OLD.failures THEN 'retrying' ELSE 'released' END;
    ELSE
        v_outcome := CASE WHEN NEW.parked_at IS NOT NULL THEN 'failed' ELSE 'suspended' END;
    END IF;
    INSERT INTO durable_attempt (run_id, number, worker_id, started_at, ended_at, outcome, error, error_type,
                                 waited_for)
    VALUES (OLD.run_id, OLD.attempts, OLD.worker_id, coalesce(OLD.attempt_started_at, OLD.claimed_at), now(),
            v_outcome, v_error, v_error_type, CASE WHEN v_outcome = 'suspended' THEN NEW.waiting_for END)
    ON CONFLICT DO NOTHING;
    RETURN NULL;
END
$fn$;

CREATE TRIGGER durable_attempt_ended AFTER UPDATE ON durable_run FOR EACH ROW
WHEN (OLD.status = 'running' AND (NEW.status <> 'running' OR NEW.attempts <> OLD.attempts))
EXECUTE FUNCTION durable_attempt_ended();
