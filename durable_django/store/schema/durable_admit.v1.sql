-- durable_admit, version 1 (migration 0006).
--
-- Admitting limited runs, in one call from the claim statement. A VOLATILE PL/pgSQL function
-- takes a fresh snapshot for each query it runs, so it can lock the limit keys and then count
-- their usage in the same round trip: what committed before the locks is always counted.
-- Parameters: the candidates the claim passed over because a limit applies to them; how many of
-- the admitted start at once (free slots); the lease; the worker; each limited queue with its
-- concurrency, rate limit and rate window (NULL where it has none); how much longer than declared
-- a rate window is counted; and how many due runs of a saturated key are held at once.
CREATE OR REPLACE FUNCTION durable_admit(
    p_run_ids text[], p_start_now int, p_lease float8, p_worker_id text,
    p_queues text[], p_queue_concurrency int[], p_queue_rate_limit int[], p_queue_rate_per float8[],
    p_rate_guard float8, p_hold_batch int
) RETURNS TABLE (run durable_run, recovered boolean, started boolean, database_now timestamptz,
                 due_since timestamptz)
LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
    v_candidates durable_run[];
    v_queues text[];
    c durable_run;
    v_now timestamptz;
    v_room jsonb;
    v_rates jsonb;
    v_rate jsonb;
    v_q int;
    v_need text[];
    v_rate_keys text[];
    v_key text;
    v_blocked text;
    v_starts_left int := p_start_now;
    v_admit_ids text[] := '{}';
    v_admit_starts boolean[] := '{}';
    v_admit_recovered boolean[] := '{}';
    v_admit_due timestamptz[] := '{}';
    v_start_keys text[] := '{}';
    v_start_pers float8[] := '{}';
    v_hold_ids text[] := '{}';
    v_hold_reasons text[] := '{}';
    v_hold_recheck timestamptz[] := '{}';
    v_saturated text[] := '{}';
    v_window timestamptz[];
    v_limit int;
    v_ahead int;
BEGIN
    IF coalesce(cardinality(p_run_ids), 0) = 0 THEN
        RETURN;
    END IF;
    -- The candidates, locked (skipping any another claim took) and still claimable, in claim order.
    SELECT array_agg(x.cand ORDER BY (x.cand).priority DESC, (x.cand).created_at) INTO v_candidates FROM (
        SELECT r AS cand FROM durable_run r
        WHERE r.run_id = ANY (p_run_ids) AND r.held_by IS NULL
          AND ((r.status = 'pending' AND (r.available_at IS NULL OR r.available_at <= now()))
               OR (r.status = 'waiting' AND r.available_at <= now())
               OR (r.status = 'running' AND r.leased_until < now()))
        FOR UPDATE OF r SKIP LOCKED
    ) x;
    IF v_candidates IS NULL THEN
        RETURN;
    END IF;
    SELECT array_agg(DISTINCT cq.queue) INTO v_queues FROM unnest(v_candidates) cq;
    -- Every limit key they touch, locked in one order (by hash) as every decision on them is.
    PERFORM pg_advisory_xact_lock(lk.h) FROM (
        SELECT DISTINCT hashtextextended(kk.lkey, 0) AS h FROM (
            SELECT ck.concurrency_key AS lkey FROM unnest(v_candidates) ck WHERE ck.concurrency_key IS NOT NULL
            UNION ALL SELECT ck.rate_key FROM unnest(v_candidates) ck WHERE ck.rate_key IS NOT NULL
            UNION ALL SELECT 'concurrency:queue:' || ql.queue
                FROM unnest(p_queues, p_queue_concurrency) ql(queue, lim) WHERE ql.lim IS NOT NULL AND ql.queue = ANY (v_queues)
            UNION ALL SELECT 'rate:queue:' || ql.queue
                FROM unnest(p_queues, p_queue_rate_limit) ql(queue, lim) WHERE ql.lim IS NOT NULL AND ql.queue = ANY (v_queues)
        ) kk
        ORDER BY 1
    ) lk;
    -- From here on each query sees every slot taken and every start counted before the locks.
    v_now := clock_timestamp();
    -- Slots left per concurrency key: a function key's (the smallest limit its runs carry) and a queue's.
    SELECT coalesce(jsonb_object_agg(fk.ckey, fk.lim - (
        SELECT count(*) FROM durable_run h
        WHERE h.concurrency_key = fk.ckey AND h.concurrency_key IS NOT NULL
          AND (h.status = 'running' OR (h.concurrency_while_waiting AND h.started_at IS NOT NULL
                                        AND h.status = ANY (ARRAY['pending', 'waiting'])))
    )), '{}') INTO v_room
    FROM (
        SELECT ck.concurrency_key AS ckey, min(ck.concurrency_limit) AS lim FROM unnest(v_candidates) ck
        WHERE ck.concurrency_key IS NOT NULL AND ck.concurrency_limit IS NOT NULL GROUP BY 1
    ) fk;
    SELECT v_room || coalesce(jsonb_object_agg('concurrency:queue:' || ql.queue, ql.lim - (
        SELECT count(*) FROM durable_run h WHERE h.status = 'running' AND h.queue = ql.queue
    )), '{}') INTO v_room
    FROM unnest(p_queues, p_queue_concurrency) ql(queue, lim) WHERE ql.lim IS NOT NULL AND ql.queue = ANY (v_queues);
    -- Starts left per rate key in its window, and the window's oldest start.
    SELECT coalesce(jsonb_object_agg(w.rkey, jsonb_build_object(
        'left', w.lim - w.used, 'limit', w.lim, 'per', w.per, 'oldest', w.oldest, 'held', 0)), '{}') INTO v_rates
    FROM (
        SELECT rk.rkey, rk.lim, rk.per, count(s.started_at) AS used, min(s.started_at) AS oldest
        FROM (
            SELECT ck.rate_key AS rkey, min(ck.rate_limit) AS lim, max(ck.rate_per) AS per FROM unnest(v_candidates) ck
            WHERE ck.rate_key IS NOT NULL AND ck.rate_limit IS NOT NULL AND ck.rate_per IS NOT NULL GROUP BY 1
            UNION ALL
            SELECT 'rate:queue:' || ql.queue, ql.lim, ql.per
            FROM unnest(p_queues, p_queue_rate_limit, p_queue_rate_per) ql(queue, lim, per)
            WHERE ql.lim IS NOT NULL AND ql.queue = ANY (v_queues)
        ) rk
        LEFT JOIN durable_rate_start s
               ON s.key = rk.rkey AND s.started_at > v_now - make_interval(secs => rk.per * p_rate_guard)
        GROUP BY rk.rkey, rk.lim, rk.per
    ) w;

    -- Decide in claim order: a run is admitted if every slot it needs is free and every rate it counts
    -- against has a start left; otherwise it is held by the first limit in its way.
    FOREACH c IN ARRAY v_candidates LOOP
        v_q := array_position(p_queues, c.queue);
        v_need := '{}';
        IF c.concurrency_key IS NOT NULL AND c.concurrency_limit IS NOT NULL
           AND NOT (c.status = 'running' OR (c.concurrency_while_waiting AND c.started_at IS NOT NULL
                                              AND c.status IN ('pending', 'waiting'))) THEN
            v_need := v_need || c.concurrency_key;
        END IF;
        IF v_q IS NOT NULL AND p_queue_concurrency[v_q] IS NOT NULL AND c.status <> 'running' THEN
            v_need := v_need || ('concurrency:queue:' || c.queue);
        END IF;
        v_blocked := NULL;
        FOREACH v_key IN ARRAY v_need LOOP
            IF (v_room ->> v_key)::int <= 0 THEN
                v_blocked := v_key;
                EXIT;
            END IF;
        END LOOP;
        IF v_blocked IS NOT NULL THEN
            -- A freed slot releases it.
            v_hold_ids := v_hold_ids || c.run_id;
            v_hold_reasons := v_hold_reasons || v_blocked;
            v_hold_recheck := v_hold_recheck || NULL::timestamptz;
            IF v_blocked = c.concurrency_key THEN
                v_saturated := v_saturated || v_blocked;
            END IF;
            CONTINUE;
        END IF;
        v_rate_keys := '{}';
        IF c.rate_key IS NOT NULL AND c.rate_limit IS NOT NULL AND c.rate_per IS NOT NULL THEN
            v_rate_keys := v_rate_keys || c.rate_key;
        END IF;
        IF v_q IS NOT NULL AND p_queue_rate_limit[v_q] IS NOT NULL THEN
            v_rate_keys := v_rate_keys || ('rate:queue:' || c.queue);
        END IF;
        FOREACH v_key IN ARRAY v_rate_keys LOOP
            IF (v_rates -> v_key ->> 'left')::int <= 0 THEN
                v_blocked := v_key;
                EXIT;
            END IF;
        END LOOP;
        IF v_blocked IS NOT NULL THEN
            -- It tries again as the window's oldest starts leave it, ``limit`` held runs at a time.
            v_rate := v_rates -> v_blocked;
            v_hold_ids := v_hold_ids || c.run_id;
            v_hold_reasons := v_hold_reasons || v_blocked;
            v_hold_recheck := v_hold_recheck || (
                coalesce((v_rate ->> 'oldest')::timestamptz, v_now) + make_interval(secs =>
                    (v_rate ->> 'per')::float8
                    * (p_rate_guard + ((v_rate ->> 'held')::int / (v_rate ->> 'limit')::int))));
            v_rates := jsonb_set(v_rates, ARRAY[v_blocked, 'held'], to_jsonb((v_rate ->> 'held')::int + 1));
            CONTINUE;
        END IF;
        IF cardinality(v_rate_keys) > 0 AND v_starts_left <= 0 THEN
            CONTINUE;  -- a rate counts starts at the claim: never claim such a run ahead of a free slot
        END IF;
        FOREACH v_key IN ARRAY v_need LOOP
            v_room := jsonb_set(v_room, ARRAY[v_key], to_jsonb((v_room ->> v_key)::int - 1));
        END LOOP;
        FOREACH v_key IN ARRAY v_rate_keys LOOP
            v_rate := v_rates -> v_key;
            v_rates := jsonb_set(v_rates, ARRAY[v_key], v_rate || jsonb_build_object(
                'left', (v_rate ->> 'left')::int - 1,
                'oldest', coalesce((v_rate ->> 'oldest')::timestamptz, v_now)));
            v_start_keys := v_start_keys || v_key;
            v_start_pers := v_start_pers || ((v_rate ->> 'per')::float8 * p_rate_guard);
        END LOOP;
        v_admit_ids := v_admit_ids || c.run_id;
        v_admit_starts := v_admit_starts || (v_starts_left > 0);
        v_admit_recovered := v_admit_recovered
            || (c.status = 'running' AND c.leased_until < v_now AND c.attempt_started_at IS NOT NULL);
        -- When it became claimable: its delay, wake-up or expired lease, else when it was last made pending.
        v_admit_due := v_admit_due || CASE c.status WHEN 'pending' THEN coalesce(c.available_at, c.updated_at)
                                                    WHEN 'waiting' THEN c.available_at
                                                    ELSE c.leased_until END;
        v_starts_left := v_starts_left - 1;
    END LOOP;

    INSERT INTO durable_rate_start (key, started_at, expires_at)
    SELECT sk.key, v_now, v_now + make_interval(secs => sk.per) FROM unnest(v_start_keys, v_start_pers) sk(key, per);
    RETURN QUERY
    UPDATE durable_run r SET
        status = 'running',
        attempts = r.attempts + 1,
        recoveries = r.recoveries + CASE WHEN ch.rec THEN 1 ELSE 0 END,
        leased_until = v_now + make_interval(secs => p_lease),
        claimed_at = v_now,
        attempt_started_at = CASE WHEN ch.st THEN v_now END,
        started_at = CASE WHEN ch.st THEN coalesce(r.started_at, v_now) ELSE r.started_at END,
        available_at = NULL,
        waiting_for = NULL,
        held_by = NULL,
        worker_id = p_worker_id,
        updated_at = v_now
    FROM unnest(v_admit_ids, v_admit_starts, v_admit_recovered, v_admit_due) AS ch(rid, st, rec, due)
    WHERE r.run_id = ch.rid
    RETURNING r, ch.rec, ch.st, v_now, ch.due;

    UPDATE durable_run r SET held_by = h.reason, available_at = h.recheck_at
    FROM unnest(v_hold_ids, v_hold_reasons, v_hold_recheck) AS h(rid, reason, recheck_at)
    WHERE r.run_id = h.rid AND r.status = 'pending';
    -- A function's rate key left with no start in its window: hold every due run of it at once (up to a
    -- batch), the j-th until the window has room for it: the (j mod limit)-th start now in the window
    -- leaves it j div limit windows later. Held runs come back at the pace they can start.
    FOR v_key IN
        SELECT e.rkey FROM jsonb_each(v_rates) AS e(rkey, val)
        WHERE (e.val ->> 'left')::int <= 0 AND e.rkey NOT LIKE 'rate:queue:%'
    LOOP
        v_rate := v_rates -> v_key;
        SELECT array_agg(s.started_at ORDER BY s.started_at) INTO v_window FROM durable_rate_start s
        WHERE s.key = v_key AND s.started_at > v_now - make_interval(secs => (v_rate ->> 'per')::float8 * p_rate_guard);
        v_limit := (v_rate ->> 'limit')::int;
        v_ahead := (v_rate ->> 'held')::int;  -- runs this admission held already
        IF coalesce(cardinality(v_window), 0) < v_limit THEN
            CONTINUE;  -- its starts expired meanwhile: the next claim admits
        END IF;
        UPDATE durable_run r SET held_by = v_key, available_at =
            v_window[cardinality(v_window) - v_limit + 1 + (d.j % v_limit)::int]
            + make_interval(secs => (v_rate ->> 'per')::float8 * p_rate_guard * (1 + d.j / v_limit))
        FROM (
            SELECT due.run_id, v_ahead + row_number() OVER (ORDER BY due.priority DESC, due.created_at) - 1 AS j
            FROM (
                SELECT h.run_id, h.priority, h.created_at FROM durable_run h
                WHERE h.rate_key = v_key AND h.status = 'pending' AND h.held_by IS NULL
                  AND (h.available_at IS NULL OR h.available_at <= now())
                ORDER BY h.priority DESC, h.created_at
                LIMIT p_hold_batch
                FOR UPDATE SKIP LOCKED
            ) due
        ) d
        WHERE r.run_id = d.run_id;
    END LOOP;
    -- A key left with no free slot: hold every due run of it at once (up to a batch), so they leave
    -- the claim index together and runs of other keys queued behind them are not delayed.
    SELECT array_agg(DISTINCT sk) INTO v_saturated FROM unnest(v_saturated) sk WHERE (v_room ->> sk)::int <= 0;
    IF v_saturated IS NOT NULL THEN
        UPDATE durable_run r SET held_by = r.concurrency_key, available_at = NULL
        WHERE r.run_id IN (
            SELECT d.run_id FROM unnest(v_saturated) AS k(key)
            CROSS JOIN LATERAL (
                SELECT h.run_id FROM durable_run h
                WHERE h.concurrency_key = k.key AND h.status = 'pending' AND h.held_by IS NULL
                  AND (h.available_at IS NULL OR h.available_at <= now())
                ORDER BY h.priority DESC, h.created_at
                LIMIT p_hold_batch
                FOR UPDATE SKIP LOCKED
            ) d
        );
    END IF;
END
$fn$;
