-- claim_jobs: hand out up to p_limit due jobs of queues p_queues and kinds p_kinds for a lease
-- of p_lease seconds, plus up to p_ahead more for a worker to start as its slots free (from
-- queues without a concurrency cap or a rate limit only: a capped queue's allowance is never
-- parked in a buffer). Honours each queue's settings: paused, limited_until, a fleet-wide
-- concurrency cap and a rate limit (fixed window). A grouped queue (one whose jobs have group
-- keys) is served group by group in turn (pick_grouped, groups.sql), each group held by its
-- pause, its cap (its own, else p_group_concurrency, else the queue's group_concurrency) and
-- its rate limit (its own, else p_group_rate_limit per p_group_rate_period seconds: the
-- claimer's limit for each group, BullMQ Pro's worker `group.limit`).
--
-- The claimer's own rate limit. p_rate_limit starts per p_rate_period seconds (NULL: none;
-- BullMQ's worker `limiter`) limit this claim, on top of the queue's settings, against the
-- window that all claims with a limit share on each queue (table worker_windows): a claim
-- with p_rate_limit = m starts at most m - window_count jobs of a queue while its window is
-- open, and opens a new window of p_rate_period seconds once it has ended. Claims without a
-- limit neither read nor count in that window. Claims with different limits share the count
-- and each compares it with its own max, as BullMQ's workers share their queue's limiter key.
-- A claim with a limit never claims ahead; in a grouped queue, neither does a claim with a group
-- cap or a group limit, nor one of a queue with a group cap.
--
-- Concurrency. Queues with limits are serialised on their settings row, and each statement
-- below takes a fresh snapshot after that lock (a VOLATILE function under READ COMMITTED), so
-- two claimers can never both admit the last free slot. Claims with their own rate limit are
-- serialised likewise on the queue's worker_windows row (locked after the settings row, queue
-- by queue in name order, so two claimers never wait for each other in a cycle); its count is
-- raised in the statement that claims the jobs, before that lock is released at commit, so
-- the next claim of any worker with a limit reads it whole. Claims without one never touch
-- that row (nor wait for it). Unlimited queues take no lock: their candidates are locked
-- FOR UPDATE SKIP LOCKED, so concurrent claimers take disjoint rows.
--
-- Plans. The statements are planned once per connection (generic plans): planning them on
-- every call would cost more than running them. A generic plan made before the table was
-- analyzed estimates one pending row; the status re-checks that would let it scan another
-- index are therefore left out where redundant (picked rows are locked by this
-- transaction and still pending), and sorts are discouraged (enable_sort = off) so that the
-- pick reads jobs_claim_idx, already in claim order. JIT never pays for statements this small.
-- tests/engine/test_migrate.py measures the pages a claim touches.
DROP FUNCTION IF EXISTS {schema}.claim_jobs(text[], text[], int, float8, int);
DROP FUNCTION IF EXISTS {schema}.claim_jobs(text[], text[], int, float8, int, int, float8);
DROP FUNCTION IF EXISTS {schema}.claim_jobs(text[], text[], int, float8, int, int, float8, text);
CREATE OR REPLACE FUNCTION {schema}.claim_jobs(
    p_queues text[], p_kinds text[], p_limit int, p_lease float8, p_ahead int,
    p_rate_limit int DEFAULT NULL, p_rate_period float8 DEFAULT NULL, p_worker text DEFAULT NULL,
    p_group_concurrency int DEFAULT NULL, p_group_rate_limit int DEFAULT NULL,
    p_group_rate_period float8 DEFAULT NULL
) RETURNS SETOF {schema}.jobs LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan SET enable_sort = off SET jit = off AS $fn$
DECLARE
    s        record;
    allow    int;
    queues   text[] := '{}';   -- queues without groups, and how many each may start
    allows   int[]  := '{}';
    grouped  text[] := '{}';   -- grouped queues: allowance and group cap
    g_allows int[]  := '{}';
    caps     int[]  := '{}';
    picked   bigint[] := '{}';
    win      record;            -- a queue's window shared by claims with their own rate limit
    w_queues text[] := '{}';   -- the windows this claim counts in: queue, end, count before
    w_ends   timestamptz[] := '{}';
    w_counts int[]  := '{}';
BEGIN
    IF p_rate_limit IS NOT NULL AND (p_rate_limit < 1 OR NOT p_rate_period > 0) THEN
        RAISE EXCEPTION 'claim_jobs: a rate limit needs a max >= 1 and a period > 0, got % per %',
            p_rate_limit, p_rate_period USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_group_rate_limit IS NOT NULL AND (p_group_rate_limit < 1 OR NOT p_group_rate_period > 0)
       OR p_group_concurrency < 1 THEN
        RAISE EXCEPTION 'claim_jobs: a group limit needs a max >= 1 and a period > 0, and a '
                        'group cap >= 1, got % per %, cap %',
            p_group_rate_limit, p_group_rate_period, p_group_concurrency
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    FOR s IN
        SELECT q.queue, qs.paused, qs.limited_until, qs.concurrency, qs.group_concurrency,
               qs.rate_limit, qs.rate_period, qs.grouped,
               (qs.concurrency IS NOT NULL OR qs.grouped OR qs.rate_limit IS NOT NULL) AS limited
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
                       qs.rate_limit, qs.rate_period, qs.window_start, qs.window_count, qs.grouped
                FROM {schema}.queue_settings qs WHERE qs.queue = s.queue FOR UPDATE) locked;
            CONTINUE WHEN s.paused OR (s.limited_until IS NOT NULL AND s.limited_until > now());
            IF s.grouped AND s.concurrency IS NULL AND s.rate_limit IS NULL
               AND coalesce(p_group_concurrency, s.group_concurrency) IS NULL
               AND p_group_rate_limit IS NULL THEN
                -- groups without caps or limits from the queue or the claim: a job claimed
                -- ahead holds no slot anyone waits for (a group's own cap or limit, if any,
                -- counts it as started all the same)
                allow := p_limit + p_ahead;
            END IF;
            IF s.concurrency IS NOT NULL THEN
                allow := least(allow, s.concurrency - (
                    SELECT count(*) FROM {schema}.jobs r
                    WHERE r.queue = s.queue AND r.status = 'running'
                      AND r.history_day = 'infinity')::int);
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
        END IF;
        IF p_rate_limit IS NOT NULL THEN
            allow := least(allow, p_limit, p_rate_limit);
            -- Serialise the claims with a limit on this queue's shared window; the row is
            -- made by the first (a concurrent maker waits for it, then finds it).
            SELECT ww.window_end, ww.window_count INTO win FROM {schema}.worker_windows ww
            WHERE ww.queue = s.queue FOR UPDATE;
            IF NOT FOUND THEN
                INSERT INTO {schema}.worker_windows (queue, window_end, window_count)
                VALUES (s.queue, '-infinity', 0) ON CONFLICT (queue) DO NOTHING;
                SELECT ww.window_end, ww.window_count INTO win FROM {schema}.worker_windows ww
                WHERE ww.queue = s.queue FOR UPDATE;
            END IF;
            -- By the claim's now(), as the queue's window above: the time its jobs are started
            -- at, so a window is never opened before the starts of the one it follows.
            IF now() >= win.window_end THEN  -- ended (or never opened): this claim opens one
                win.window_end := now() + make_interval(secs => p_rate_period);
                win.window_count := 0;
            END IF;
            allow := least(allow, p_rate_limit - win.window_count);
            CONTINUE WHEN allow <= 0;
            w_queues := w_queues || s.queue;
            w_ends := w_ends || win.window_end;
            w_counts := w_counts || win.window_count;
        END IF;
        IF s.grouped THEN
            grouped := grouped || s.queue;
            g_allows := g_allows || allow;
            caps := caps || coalesce(p_group_concurrency, s.group_concurrency);
            CONTINUE;
        END IF;
        queues := queues || s.queue;
        allows := allows || allow;
    END LOOP;

    IF cardinality(queues) = 0 AND cardinality(grouped) = 0 THEN
        RETURN;
    END IF;

    -- Grouped queues first, each serving its groups in turn (pick_grouped), then the others.
    FOR i IN 1 .. cardinality(grouped) LOOP
        picked := picked || {schema}.pick_grouped(
            grouped[i], p_kinds, least(g_allows[i], p_limit + p_ahead - cardinality(picked)),
            caps[i],
            p_group_rate_limit, p_group_rate_period);
    END LOOP;

    -- Pick the ids first, then update by primary key: a generic plan cannot know that the
    -- candidates are few, and must never be tempted into a hash join over the whole table.
    IF cardinality(queues) > 0 THEN
        SELECT picked || coalesce(array_agg(x.id), '{}') INTO picked FROM (
            SELECT c.id, c.priority, c.run_at
            FROM unnest(queues, allows) AS q(queue, allow)
            CROSS JOIN LATERAL (
                SELECT j.id, j.priority, j.run_at FROM {schema}.jobs j
                WHERE j.queue = q.queue AND j.status = 'pending'
                  AND j.history_day = 'infinity'  -- jobs_live (history.sql): pruned when planned
                  AND (j.pending_deps = 0 OR NOT j.waits)  -- jobs_claim_idx's predicate
                  AND j.run_at <= now() AND j.kind = ANY(p_kinds)
                ORDER BY j.priority DESC, j.run_at, j.id
                LIMIT q.allow
                FOR UPDATE SKIP LOCKED
            ) c
            ORDER BY 2 DESC, 3, 1
            LIMIT p_limit + p_ahead - cardinality(picked)
        ) x;
    END IF;

    IF cardinality(picked) = 0 THEN
        RETURN;
    END IF;

    RETURN QUERY
    WITH claimed AS (
        UPDATE {schema}.jobs j
        SET status = 'running', attempts = j.attempts + 1, lock_token = gen_random_uuid(),
            heartbeat_at = now(), locked_until = now() + make_interval(secs => p_lease),
            started_at = now(), worker = p_worker,
            waits = true  -- once run, it waits for its prerequisites when it goes back
        WHERE j.id = ANY(picked) AND j.history_day = 'infinity'
          AND j.status = 'pending'  -- locked by the pick (a grouped pick, unlocked: re-checked)
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
    ),
    counted_for_workers AS (  -- the windows locked above, with the jobs started in them
        UPDATE {schema}.worker_windows ww
        SET window_end = w.window_end, window_count = w.window_count + n.started
        FROM unnest(w_queues, w_ends, w_counts) AS w(queue, window_end, window_count)
        JOIN (SELECT queue, count(*)::int AS started FROM claimed GROUP BY queue) n
          ON n.queue = w.queue
        WHERE ww.queue = w.queue
    )
    SELECT claimed.* FROM claimed;
END
$fn$;
