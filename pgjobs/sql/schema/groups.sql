-- Groups (table job_groups, migration 0006): a queue whose jobs have group keys is served
-- group by group in turn, each group's jobs in claim order (priority, due time, id).

-- note_job_group: a job's insert records its group (a row of job_groups, new groups first in
-- the rotation) and, with the queue's first group, marks the queue grouped. Fired only for a
-- job in flight with a group key (the trigger's WHEN), so other inserts, and a finished job's
-- move to a history partition (an insert there), pay nothing.
CREATE OR REPLACE FUNCTION {schema}.note_job_group() RETURNS trigger
LANGUAGE plpgsql AS $fn$
BEGIN
    INSERT INTO {schema}.job_groups (queue, group_key) VALUES (NEW.queue, NEW.group_key)
    ON CONFLICT DO NOTHING;
    IF FOUND THEN
        INSERT INTO {schema}.queue_settings (queue, grouped) VALUES (NEW.queue, true)
        ON CONFLICT (queue) DO UPDATE SET grouped = true WHERE NOT queue_settings.grouped;
    END IF;
    RETURN NULL;
END
$fn$;

-- pick_grouped: the ids of at most p_allow ready jobs of grouped queue p_queue and kinds
-- p_kinds for one claim, the groups served in turn. Called by claim_jobs with the queue's
-- settings row locked, so claims of the queue run one at a time and a group's running count,
-- its window and the queue's cursor are read whole.
--
-- The rotation. The groups are served in the order of their keys, starting after the group
-- the queue's last claim served (queue_settings.group_cursor) and wrapping around. The walk
-- reads the pending jobs' index (jobs_group_claim_idx), one descent per group that has a ready
-- job of these kinds, so groups with none (empty, or only delayed jobs or other kinds) cost
-- little or nothing. A group is passed while paused or manually limited (limited_until), when
-- its running jobs reach its cap (its own concurrency, else p_cap: the claim's group cap or the
-- queue's), and when its window is full (its own rate limit, else p_group_rate starts per
-- p_group_period seconds, the claim's); what is left of the smallest of these is its
-- allowance. Up to p_allow groups are taken; the claim then takes their jobs round by round
-- (the first ready job of each group, in rotation order, then the second of each, ...), each
-- group up to its allowance and its share of p_allow (so a claim of fewer groups than p_allow
-- may take fewer jobs than it could: the next claim takes more). Priority orders jobs within a group, never across groups. Jobs
-- without a group come before the groups' (as in BullMQ Pro), but only those among the
-- queue's next p_allow * 2 ready jobs in claim order: no index holds a grouped queue's jobs
-- without a group apart, and a longer look would cost every claim of the queue. The cursor
-- moves to the last group taken; starts count in the windows of groups a limit applies to.
--
-- The pick takes no row locks: claim_jobs's update re-checks that each job is still pending
-- (a job picked by a claim that read the queue as not yet grouped, or cancelled since, is
-- left out). A job so left out still counts in its group's window: a window can only be
-- fuller than its starts, never less.
CREATE OR REPLACE FUNCTION {schema}.pick_grouped(
    p_queue text, p_kinds text[], p_allow int, p_cap int,
    p_group_rate int, p_group_period float8
) RETURNS bigint[] LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan SET jit = off AS $fn$
DECLARE
    cursor_at text;
    use_settings bool;         -- the groups' rows matter (settings, or the claim's limits)
    lower_key text;            -- a pass of the walk: the groups after lower_key, up to upper_key
    upper_key text;
    found    text[];
    allowed  int[];
    found_heads bigint[];
    heads    bigint[] := '{}'; -- each served group's first ready job (the walk reads it)
    limited  bool;
    kept     bool := false;    -- a served group has a cap or a limit: its state is recorded
    keys     text[] := '{}';   -- the groups served, in rotation order, and their allowances
    g_allows int[]  := '{}';
    share    int;
    served   int;              -- how many of keys the claim took a job from
    picked   bigint[];
BEGIN
    IF p_allow <= 0 THEN
        RETURN '{}';
    END IF;
    SELECT qs.group_cursor, qs.group_settings INTO cursor_at, use_settings
    FROM {schema}.queue_settings qs WHERE qs.queue = p_queue;
    -- the groups' windows and the caps they were held to live in their rows too
    use_settings := use_settings OR p_cap IS NOT NULL OR p_group_rate IS NOT NULL;
    lower_key := coalesce(cursor_at, '');
    FOR pass IN 1 .. 2 LOOP
        -- One statement walks the index group by group (a recursive descent per group, lazy:
        -- it stops once p_allow groups that may start a job are found) and sizes each group's
        -- allowance from its settings, its running jobs and its window.
        WITH RECURSIVE walk(group_key, id) AS (
            (SELECT j.group_key, j.id FROM {schema}.jobs j
             WHERE j.queue = p_queue AND j.group_key > lower_key AND j.status = 'pending'
               AND (j.pending_deps = 0 OR NOT j.waits) AND j.group_key IS NOT NULL
               AND j.run_at <= now() AND j.kind = ANY(p_kinds)
               AND (upper_key IS NULL OR j.group_key <= upper_key)
             ORDER BY j.group_key LIMIT 1)
            UNION ALL
            SELECT nxt.group_key, nxt.id FROM walk w
            CROSS JOIN LATERAL (
                SELECT j.group_key, j.id FROM {schema}.jobs j
                WHERE j.queue = p_queue AND j.group_key > w.group_key AND j.status = 'pending'
                  AND (j.pending_deps = 0 OR NOT j.waits) AND j.group_key IS NOT NULL
                  AND j.run_at <= now() AND j.kind = ANY(p_kinds)
                  AND (upper_key IS NULL OR j.group_key <= upper_key)
                ORDER BY j.group_key LIMIT 1) nxt
        )
        SELECT coalesce(array_agg(t.group_key), '{}'), coalesce(array_agg(t.allow), '{}'),
               coalesce(array_agg(t.id), '{}'), coalesce(bool_or(t.limited), false)
        INTO found, allowed, found_heads, limited
        FROM (
            SELECT w.group_key, w.id, a.allow, a.limited FROM walk w
            CROSS JOIN LATERAL (
                SELECT least(
                           p_allow,
                           CASE WHEN coalesce(g.concurrency, p_cap) IS NULL THEN p_allow
                                ELSE coalesce(g.concurrency, p_cap) - (
                                    SELECT count(*) FROM {schema}.jobs r
                                    WHERE r.queue = p_queue AND r.status = 'running'
                                      AND r.group_key = w.group_key)::int END,
                           CASE WHEN coalesce(g.rate_limit, p_group_rate) IS NULL THEN p_allow
                                WHEN g.window_start IS NOT NULL
                                     AND now() < g.window_start + make_interval(
                                         secs => coalesce(g.rate_period, p_group_period))
                                THEN coalesce(g.rate_limit, p_group_rate) - g.window_count
                                ELSE coalesce(g.rate_limit, p_group_rate) END) AS allow,
                       (coalesce(g.concurrency, p_cap, g.rate_limit, p_group_rate,
                                 g.seen_cap, g.window_limit) IS NOT NULL
                        OR g.window_start IS NOT NULL) AS limited
                FROM (SELECT NULL) AS one
                LEFT JOIN {schema}.job_groups g  -- not read at all unless use_settings
                  ON use_settings AND g.queue = p_queue AND g.group_key = w.group_key
                WHERE g.paused_at IS NULL AND NOT coalesce(g.limited_until > now(), false)
            ) a
            WHERE a.allow > 0
            LIMIT p_allow - cardinality(keys)
        ) t;
        keys := keys || found;
        g_allows := g_allows || allowed;
        heads := heads || found_heads;
        kept := kept OR limited;
        EXIT WHEN cardinality(keys) >= p_allow OR cursor_at IS NULL;
        lower_key := '';  -- the second pass: from the first group up to the cursor's
        upper_key := cursor_at;
    END LOOP;

    -- Jobs without a group first, among the queue's next p_allow * 2 ready jobs.
    SELECT coalesce(array_agg(w.id ORDER BY w.priority DESC, w.run_at, w.id), '{}') INTO picked
    FROM (SELECT j.id, j.priority, j.run_at, j.group_key FROM {schema}.jobs j
          WHERE j.queue = p_queue AND j.status = 'pending'
            AND (j.pending_deps = 0 OR NOT j.waits)
            AND j.run_at <= now() AND j.kind = ANY(p_kinds)
          ORDER BY j.priority DESC, j.run_at, j.id
          LIMIT p_allow * 2) w
    WHERE w.group_key IS NULL;
    picked := picked[1 : p_allow];
    served := cardinality(keys);
    IF cardinality(keys) >= p_allow - cardinality(picked) THEN
        -- a round of one job per group fills the claim: the walk's heads
        served := p_allow - cardinality(picked);
        picked := picked || heads[1 : served];
    ELSIF cardinality(keys) > 0 THEN
        -- fewer groups than the claim's room: round by round, each group up to its allowance
        -- and its share (more would be read only to be left)
        share := ceil((p_allow - cardinality(picked))::numeric / cardinality(keys))::int;
        SELECT picked || coalesce(array_agg(c.id ORDER BY c.rn, c.ord), '{}') INTO picked
        FROM (
            SELECT l.id, l.rn, q.ord
            FROM unnest(keys, g_allows) WITH ORDINALITY AS q(group_key, allow, ord)
            CROSS JOIN LATERAL (
                SELECT j.id, row_number() OVER (ORDER BY j.priority DESC, j.run_at, j.id) AS rn
                FROM (SELECT j.id, j.priority, j.run_at FROM {schema}.jobs j
                      WHERE j.queue = p_queue AND j.group_key = q.group_key
                        AND j.status = 'pending' AND (j.pending_deps = 0 OR NOT j.waits)
                        AND j.run_at <= now() AND j.kind = ANY(p_kinds)
                      ORDER BY j.priority DESC, j.run_at, j.id
                      LIMIT least(q.allow, share)) j
            ) l
            ORDER BY l.rn, q.ord
            LIMIT p_allow - cardinality(picked)
        ) c;
    END IF;

    IF served > 0 THEN  -- the last group served
        UPDATE {schema}.queue_settings qs SET group_cursor = keys[served]
        WHERE qs.queue = p_queue;
    END IF;
    IF kept THEN
        -- what applied, for the groups' status; the window only where a limit applies
        UPDATE {schema}.job_groups jg
        SET window_start = CASE
                WHEN n.period IS NULL THEN NULL
                WHEN jg.window_start IS NULL
                     OR now() >= jg.window_start + make_interval(secs => n.period)
                THEN now() ELSE jg.window_start END,
            window_count = CASE
                WHEN n.period IS NULL THEN 0
                WHEN jg.window_start IS NULL
                     OR now() >= jg.window_start + make_interval(secs => n.period)
                THEN n.started ELSE jg.window_count + n.started END,
            window_limit = n.rate,
            window_period = n.period,
            seen_cap = n.cap
        FROM (SELECT k.group_key, count(j.id)::int AS started,
                     coalesce(min(jg2.rate_limit), p_group_rate) AS rate,
                     coalesce(min(jg2.rate_period), p_group_period) AS period,
                     coalesce(min(jg2.concurrency), p_cap) AS cap
              FROM unnest(keys[1 : served]) AS k(group_key)
              JOIN {schema}.job_groups jg2 ON jg2.queue = p_queue AND jg2.group_key = k.group_key
              LEFT JOIN {schema}.jobs j ON j.id = ANY(picked) AND j.group_key = k.group_key
              GROUP BY k.group_key) n
        WHERE jg.queue = p_queue AND jg.group_key = n.group_key
          AND (n.period IS NOT NULL OR jg.window_start IS NOT NULL
               OR jg.seen_cap IS DISTINCT FROM n.cap
               OR jg.window_limit IS DISTINCT FROM n.rate);
    END IF;
    RETURN picked;
END
$fn$;

CREATE OR REPLACE TRIGGER jobs_note_group AFTER INSERT ON {schema}.jobs
    FOR EACH ROW WHEN (NEW.group_key IS NOT NULL AND NEW.finished_at IS NULL) EXECUTE FUNCTION {schema}.note_job_group();
