-- durable_admit, version 4 (migration 0016).
--
-- Version 3 held back only pending runs: a sleeper whose sleep had ended or a waiter whose wait had timed out,
-- kept back by a full concurrency or rate key, stayed ``waiting`` and due, and a run whose holder's lease
-- had expired, kept back by a rate, stayed expired; either stayed first among the claim's candidates, so
-- every claim took it, admitted nothing and claimed nothing else while slots sat idle. A woken run kept
-- back is now held as a pending run is (its wait is over: it is due, as a woken run is); an expired run
-- kept back by a rate keeps its slots, as a running run does, and comes back when the window has room,
-- as a held run does. The rest is as in version 3.
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
    v_due text[];
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
    -- Starts left per rate key in its window, the window's oldest start, and the key's running total: the
    -- starts in the window are its newest row's total less its oldest row's in the window, plus that row's
    -- own (two index probes, however many starts the window holds).
    SELECT coalesce(jsonb_object_agg(w.rkey, jsonb_build_object(
        'left', w.lim - w.used, 'limit', w.lim, 'per', w.per, 'oldest', w.oldest, 'held', 0, 'total', w.total)), '{}')
        INTO v_rates
    FROM (
        SELECT rk.rkey, rk.lim, rk.per, coalesce(newest.total - oldest.total + oldest.starts, 0) AS used,
               oldest.started_at AS oldest, coalesce(newest.total, 0) AS total
        FROM (
            SELECT ck.rate_key AS rkey, min(ck.rate_limit) AS lim, max(ck.rate_per) AS per FROM unnest(v_candidates) ck
            WHERE ck.rate_key IS NOT NULL AND ck.rate_limit IS NOT NULL AND ck.rate_per IS NOT NULL GROUP BY 1
            UNION ALL
            SELECT 'rate:queue:' || ql.queue, ql.lim, ql.per
            FROM unnest(p_queues, p_queue_rate_limit, p_queue_rate_per) ql(queue, lim, per)
            WHERE ql.lim IS NOT NULL AND ql.queue = ANY (v_queues)
        ) rk
        LEFT JOIN LATERAL (
            SELECT s.started_at, s.starts, s.total FROM durable_rate_start s
            WHERE s.key = rk.rkey AND s.started_at > v_now - make_interval(secs => rk.per * p_rate_guard)
            ORDER BY s.started_at LIMIT 1
        ) oldest ON true
        LEFT JOIN LATERAL (
            SELECT s.total FROM durable_rate_start s WHERE s.key = rk.rkey ORDER BY s.started_at DESC LIMIT 1
        ) newest ON true
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
        IF v_blocked IS NOT NULL AND v_blocked NOT LIKE 'rate:queue:%' AND c.available_at IS NULL
           AND c.status = 'pending' THEN
            CONTINUE;  -- new to a function's rate key: held below with its other due runs, behind those it holds
        END IF;
        IF v_blocked IS NOT NULL THEN
            -- It tries again as the window's oldest starts leave it, ``limit`` held runs at a time: a run
            -- whose turn came (or whose delay ended) while the window was still full keeps its place in front.
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

    -- One row per key for all the starts this admission counted against it, under the key's lock.
    IF cardinality(v_start_keys) > 0 THEN
        INSERT INTO durable_rate_start (key, started_at, expires_at, starts, total)
        SELECT sk.key, v_now, v_now + make_interval(secs => max(sk.per)), count(*),
               (v_rates -> sk.key ->> 'total')::bigint + count(*)
        FROM unnest(v_start_keys, v_start_pers) sk(key, per) GROUP BY sk.key;
    END IF;
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

    IF cardinality(v_hold_ids) > 0 THEN
        UPDATE durable_run r SET held_by = h.reason, available_at = h.recheck_at, status = 'pending',
            waiting_for = NULL, updated_at = CASE WHEN r.status = 'waiting' THEN v_now ELSE r.updated_at END
        FROM unnest(v_hold_ids, v_hold_reasons, v_hold_recheck) AS h(rid, reason, recheck_at)
        WHERE r.run_id = h.rid AND r.status IN ('pending', 'waiting');
        UPDATE durable_run r SET leased_until = coalesce(h.recheck_at, v_now + make_interval(secs => p_lease))
        FROM unnest(v_hold_ids, v_hold_recheck) AS h(rid, recheck_at)
        WHERE r.run_id = h.rid AND r.status = 'running';
    END IF;
    -- A function's rate key left with no start in its window: hold every due run of it not held yet (up to a
    -- batch, this admission's candidates among them), in claim order, each until the window has room for it,
    -- behind the runs the key holds already: with k held, the j-th (j = k, k + 1, ...) waits for the
    -- (j mod limit)-th start now in the window to leave it, j div limit windows later. Held runs come back
    -- at the pace they can start, no more at each start's turn than it makes room for.
    FOR v_key IN
        SELECT e.rkey FROM jsonb_each(v_rates) AS e(rkey, val)
        WHERE (e.val ->> 'left')::int <= 0 AND e.rkey NOT LIKE 'rate:queue:%'
    LOOP
        SELECT array_agg(due.run_id ORDER BY due.priority DESC, due.created_at) INTO v_due FROM (
            SELECT h.run_id, h.priority, h.created_at FROM durable_run h
            WHERE h.rate_key = v_key AND h.status = 'pending' AND h.held_by IS NULL
              AND (h.available_at IS NULL OR h.available_at <= now())
            ORDER BY h.priority DESC, h.created_at
            LIMIT p_hold_batch
            FOR UPDATE SKIP LOCKED
        ) due;
        IF v_due IS NULL THEN
            CONTINUE;  -- every due run of it is held already: the window is not read
        END IF;
        v_rate := v_rates -> v_key;
        SELECT array_agg(s.started_at ORDER BY s.started_at) INTO v_window
        FROM durable_rate_start s CROSS JOIN LATERAL generate_series(1, s.starts) AS each_start
        WHERE s.key = v_key AND s.started_at > v_now - make_interval(secs => (v_rate ->> 'per')::float8 * p_rate_guard);
        v_limit := (v_rate ->> 'limit')::int;
        IF coalesce(cardinality(v_window), 0) < v_limit THEN
            CONTINUE;  -- its starts expired meanwhile: the next claim admits
        END IF;
        -- The runs it holds already (counted up to ten batches).
        SELECT count(*) INTO v_ahead FROM (
            SELECT FROM durable_run h WHERE h.held_by = v_key AND h.status = 'pending' LIMIT 10 * p_hold_batch
        ) held;
        UPDATE durable_run r SET held_by = v_key, available_at =
            v_window[cardinality(v_window) - v_limit + 1 + (d.j % v_limit)::int]
            + make_interval(secs => (v_rate ->> 'per')::float8 * p_rate_guard * (1 + d.j / v_limit))
        FROM (SELECT due.run_id, v_ahead + due.n - 1 AS j FROM unnest(v_due) WITH ORDINALITY AS due(run_id, n)) d
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
