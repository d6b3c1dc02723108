-- 0008: claim_jobs and finish_jobs of 0007, with
--   * claiming ahead of free slots (claim_jobs takes p_ahead);
--   * a job given back without a delay (released unrun) keeping its due time;
--   * an exact count-retention trim. 0005/0007 trimmed each (queue, status) history by reading
--     its newest n + 100 rows, in each finish's own snapshot. Concurrent finishes cannot see
--     each other's rows: each kept n of what it saw, and every round of them left the others'
--     rows as excess (a 4-worker load kept 9,380 of 1,000). The trim now takes a transaction
--     advisory lock per (queue, status), in one order, and reads with a snapshot taken after
--     it: the previous trimmer has committed, so every trim sees every committed row and
--     leaves exactly n.
--   * finish_jobs locks only the rows it will write (id and token match). It locked every id it
--     was given: a row completed meanwhile by another worker (this worker's lease had lapsed)
--     stayed locked while this call waited for the trim lock, and the trimmer holding that lock
--     could be deleting it: a deadlock.

-- Claiming ahead. p_ahead more jobs than the p_limit free slots may be taken, from queues without
-- a concurrency cap or a rate limit only: a worker buffers them and starts them as its slots free
-- (larger claims for short jobs), and a capped queue's allowance is never parked in a buffer.
DROP FUNCTION {schema}.claim_jobs(text[], text[], int, float8);
CREATE FUNCTION {schema}.claim_jobs(
    p_queues text[], p_kinds text[], p_limit int, p_lease float8, p_ahead int
) RETURNS SETOF {schema}.jobs LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan AS $fn$
DECLARE
    s        record;
    allow    int;
    queues   text[] := '{}';   -- queues without a group cap, and how many each may start
    allows   int[]  := '{}';
    grouped  text[] := '{}';   -- queues with a group cap: allowance and cap
    g_allows int[]  := '{}';
    caps     int[]  := '{}';
    picked   bigint[];
BEGIN
    FOR s IN
        SELECT q.queue, qs.paused, qs.limited_until, qs.concurrency, qs.group_concurrency,
               qs.rate_limit, qs.rate_period,
               (qs.concurrency IS NOT NULL OR qs.group_concurrency IS NOT NULL
                OR qs.rate_limit IS NOT NULL) AS limited
        FROM unnest(p_queues) AS q(queue)
        LEFT JOIN {schema}.queue_settings qs ON qs.queue = q.queue
        ORDER BY q.queue
    LOOP
        CONTINUE WHEN s.paused OR (s.limited_until IS NOT NULL AND s.limited_until > now());
        allow := p_limit + p_ahead;
        IF s.limited THEN
            allow := p_limit;
            -- Serialise claimers of this queue; re-read the row after waiting for it.
            SELECT * INTO s FROM (
                SELECT qs.queue, qs.paused, qs.limited_until, qs.concurrency, qs.group_concurrency,
                       qs.rate_limit, qs.rate_period, qs.window_start, qs.window_count
                FROM {schema}.queue_settings qs WHERE qs.queue = s.queue FOR UPDATE) locked;
            CONTINUE WHEN s.paused OR (s.limited_until IS NOT NULL AND s.limited_until > now());
            IF s.concurrency IS NOT NULL THEN
                allow := least(allow, s.concurrency - (
                    SELECT count(*) FROM {schema}.jobs r
                    WHERE r.queue = s.queue AND r.status = 'running')::int);
            END IF;
            IF s.rate_limit IS NOT NULL THEN
                IF s.window_start IS NULL
                   OR now() >= s.window_start + make_interval(secs => s.rate_period) THEN
                    allow := least(allow, s.rate_limit);
                ELSE
                    allow := least(allow, s.rate_limit - s.window_count);
                END IF;
            END IF;
            CONTINUE WHEN allow <= 0;
            IF s.group_concurrency IS NOT NULL THEN
                grouped := grouped || s.queue;
                g_allows := g_allows || allow;
                caps := caps || s.group_concurrency;
                CONTINUE;
            END IF;
        END IF;
        queues := queues || s.queue;
        allows := allows || allow;
    END LOOP;

    IF cardinality(queues) = 0 AND cardinality(grouped) = 0 THEN
        RETURN;
    END IF;

    -- Pick the ids first, then update by primary key: a generic plan cannot know that the
    -- candidates are few, and must never be tempted into a hash join over the whole table.
    SELECT coalesce(array_agg(x.id), '{}') INTO picked FROM (
        SELECT c.id, c.priority, c.run_at
        FROM unnest(queues, allows) AS q(queue, allow)
        CROSS JOIN LATERAL (
            SELECT j.id, j.priority, j.run_at FROM {schema}.jobs j
            WHERE j.queue = q.queue AND j.status = 'pending' AND j.pending_deps = 0
              AND j.run_at <= now() AND j.kind = ANY(p_kinds)
            ORDER BY j.priority DESC, j.run_at, j.id
            LIMIT q.allow
            FOR UPDATE SKIP LOCKED
        ) c
        UNION ALL
        -- Queues with a per-group cap: rank candidates within their group and admit those
        -- that fit under the cap next to the group's running jobs. Claims on these queues are
        -- serialised by the settings lock, so nothing can over-admit between read and update.
        SELECT g.id, g.priority, g.run_at
        FROM unnest(grouped, g_allows, caps) AS q(queue, allow, cap)
        CROSS JOIN LATERAL (
            SELECT ranked.id, ranked.priority, ranked.run_at FROM (
                SELECT w.*, row_number() OVER (PARTITION BY w.group_key
                                               ORDER BY w.priority DESC, w.run_at, w.id) AS rn
                FROM (SELECT j.id, j.priority, j.run_at, j.group_key FROM {schema}.jobs j
                      WHERE j.queue = q.queue AND j.status = 'pending' AND j.pending_deps = 0
                        AND j.run_at <= now() AND j.kind = ANY(p_kinds)
                      ORDER BY j.priority DESC, j.run_at, j.id
                      LIMIT q.allow * 20 + 100) w
            ) ranked
            LEFT JOIN (SELECT r.group_key, count(*) AS running FROM {schema}.jobs r
                       WHERE r.queue = q.queue AND r.status = 'running' AND r.group_key IS NOT NULL
                       GROUP BY r.group_key) busy ON busy.group_key = ranked.group_key
            WHERE ranked.group_key IS NULL OR ranked.rn + coalesce(busy.running, 0) <= q.cap
            ORDER BY ranked.priority DESC, ranked.run_at, ranked.id
            LIMIT q.allow
        ) g
        ORDER BY 2 DESC, 3, 1
        LIMIT p_limit + p_ahead
    ) x;

    IF cardinality(picked) = 0 THEN
        RETURN;
    END IF;

    RETURN QUERY
    WITH claimed AS (
        UPDATE {schema}.jobs j
        SET status = 'running', attempts = j.attempts + 1, lock_token = gen_random_uuid(),
            heartbeat_at = now(), locked_until = now() + make_interval(secs => p_lease),
            started_at = now()
        WHERE j.id = ANY(picked)  -- locked by the pick above: still pending
        RETURNING j.*
    ),
    counted AS (
        UPDATE {schema}.queue_settings qs
        SET window_start = CASE WHEN qs.window_start IS NULL
                                  OR now() >= qs.window_start + make_interval(secs => qs.rate_period)
                                THEN now() ELSE qs.window_start END,
            window_count = CASE WHEN qs.window_start IS NULL
                                  OR now() >= qs.window_start + make_interval(secs => qs.rate_period)
                                THEN 0 ELSE qs.window_count END + n.started
        FROM (SELECT queue, count(*)::int AS started FROM claimed GROUP BY queue) n
        WHERE qs.queue = n.queue AND qs.rate_limit IS NOT NULL
    )
    SELECT claimed.* FROM claimed;
END
$fn$;

CREATE OR REPLACE FUNCTION {schema}.finish_jobs(
    p_ids bigint[], p_tokens uuid[], p_statuses text[], p_outputs text[], p_delays float8[],
    p_errors text[], p_refunds int[], p_deferred int[], p_channel text
) RETURNS SETOF bigint LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan AS $fn$
DECLARE
    done_ids     bigint[];
    flow_ids     bigint[];
    remove_ids   bigint[];
    done_queues  text[];
    wake_queues  text[];
    trim_queues  text[];
    trim_states  text[];
    trim_keep    int[];
    trimmed      record;
BEGIN
    -- One lock order for every multi-row writer of running jobs: ascending id. Only the rows
    -- still held by the given tokens: no other row stays locked while the trim lock is awaited.
    PERFORM 1 FROM {schema}.jobs j, unnest(p_ids, p_tokens) AS f(id, token)
    WHERE j.id = f.id AND j.lock_token = f.token
    ORDER BY j.id
    FOR UPDATE OF j;
    WITH written AS (
        UPDATE {schema}.jobs j
        SET status = f.status,
            output = CASE WHEN f.status = 'completed' THEN f.output::jsonb ELSE j.output END,
            run_at = CASE WHEN f.status = 'pending'  -- a NULL delay keeps the due time
                          THEN coalesce(now() + make_interval(secs => f.delay), j.run_at)
                          ELSE j.run_at END,
            last_error = coalesce(f.error::jsonb, j.last_error),
            attempts = j.attempts - f.refund,
            deferrals = j.deferrals + f.deferred,
            finished_at = CASE WHEN f.status = 'pending' THEN NULL ELSE now() END,
            lock_token = NULL, locked_until = NULL
        FROM unnest(p_ids, p_tokens, p_statuses, p_outputs, p_delays, p_errors, p_refunds,
                    p_deferred) AS f(id, token, status, output, delay, error, refund, deferred)
        WHERE j.id = f.id AND j.lock_token = f.token  -- a token is set only while running
        RETURNING j.id, j.status, j.queue, j.flow_id,
                  (j.retention -> j.status ->> 'count')::int AS keep_count
    )
    SELECT array_agg(id),
           array_agg(id) FILTER (WHERE flow_id IS NOT NULL AND status <> 'pending'),
           array_agg(id) FILTER (WHERE keep_count = 0),
           array_agg(DISTINCT queue),
           array_agg(DISTINCT queue) FILTER (WHERE status = 'pending'),
           array_agg(queue) FILTER (WHERE keep_count > 0),
           array_agg(status) FILTER (WHERE keep_count > 0),
           array_agg(keep_count) FILTER (WHERE keep_count > 0)
    INTO done_ids, flow_ids, remove_ids, done_queues, wake_queues,
         trim_queues, trim_states, trim_keep
    FROM written;

    IF done_ids IS NULL THEN
        RETURN;
    END IF;
    IF flow_ids IS NOT NULL THEN
        wake_queues := coalesce(wake_queues, '{}') || ARRAY(
            SELECT DISTINCT d.queue FROM {schema}.jobs d
            WHERE d.id IN (SELECT {schema}.resolve_dependents(flow_ids)));
    END IF;
    -- A queue with a concurrency cap has a free slot now: wake its workers.
    wake_queues := coalesce(wake_queues, '{}') || ARRAY(
        SELECT qs.queue FROM {schema}.queue_settings qs
        WHERE qs.queue = ANY(done_queues)
          AND (qs.concurrency IS NOT NULL OR qs.group_concurrency IS NOT NULL));
    IF cardinality(wake_queues) > 0 THEN
        PERFORM pg_notify(p_channel, q) FROM unnest(wake_queues) AS q;
    END IF;
    -- Retention {"count": 0}: remove at once, unless a dependent still needs the output.
    IF remove_ids IS NOT NULL THEN
        DELETE FROM {schema}.jobs j
        WHERE j.id = ANY(remove_ids)
          AND NOT EXISTS (SELECT FROM {schema}.job_edges e JOIN {schema}.jobs d ON d.id = e.dependent_id
                          WHERE e.prerequisite_id = j.id AND d.status IN ('pending', 'running'));
    END IF;
    -- Retention {"count": n > 0}: trim the history of each (queue, status) just written to, as
    -- BullMQ does at completion. Trimmers of one history take turns (a transaction advisory
    -- lock, taken in (queue, status) order) and the DELETE's snapshot is taken once the lock is
    -- held, so it sees every row committed by earlier trimmers: the history is left at exactly n
    -- (rows added by other writers, such as imports, are the GC's). It reads the newest n + w + 100
    -- rows through jobs_finished_idx, w being how many this call added: a long history costs
    -- nothing, and an excess beyond 100 rows (the retention just lowered) is left to the GC.
    IF trim_queues IS NOT NULL THEN
        FOR trimmed IN SELECT DISTINCT u.q, u.s FROM unnest(trim_queues, trim_states) AS u(q, s)
                 ORDER BY u.q, u.s
        LOOP
            PERFORM pg_advisory_xact_lock(
                hashtextextended(format('pgjobs:trim:{schema}:%s:%s', trimmed.q, trimmed.s), 0));
        END LOOP;
        DELETE FROM {schema}.jobs j
        USING (
            SELECT t.id
            FROM (SELECT u.q, u.s, max(u.k) AS k, count(*)::int AS w
                  FROM unnest(trim_queues, trim_states, trim_keep) AS u(q, s, k)
                  GROUP BY u.q, u.s) g,
            LATERAL (
                SELECT newest.id, newest.keep,
                       row_number() OVER (ORDER BY newest.finished_at DESC, newest.id DESC) AS rank
                FROM (SELECT h.id, h.finished_at, (h.retention -> h.status ->> 'count')::int AS keep
                      FROM {schema}.jobs h
                      WHERE h.queue = g.q AND h.status = g.s AND h.finished_at IS NOT NULL
                      ORDER BY h.finished_at DESC, h.id DESC
                      LIMIT g.k + g.w + 100) newest
            ) t
            WHERE t.keep IS NOT NULL AND t.rank > t.keep
        ) doomed
        WHERE j.id = doomed.id
          AND NOT EXISTS (SELECT FROM {schema}.job_edges e JOIN {schema}.jobs d ON d.id = e.dependent_id
                          WHERE e.prerequisite_id = j.id AND d.status IN ('pending', 'running'));
    END IF;
    RETURN QUERY SELECT unnest(done_ids);
END
$fn$;

ALTER FUNCTION {schema}.claim_jobs(text[], text[], int, float8, int) SET enable_sort = off SET jit = off;
ALTER FUNCTION {schema}.finish_jobs(bigint[], uuid[], text[], text[], float8[], text[], int[],
                                    int[], text) SET jit = off;
