-- 0007: finish_jobs locks its rows in id order before writing them, as the heartbeat does, so a
-- worker's outcome batch and its heartbeat (or another batch) cannot deadlock on the same rows
-- (found by the SIGKILL reliability scenario). Otherwise unchanged from 0005.

-- Write many handler outcomes, each fenced by its lock token, then resolve flow dependents and
-- apply "remove at once" retention, all in this one statement's transaction. Returns the ids
-- written: an id missing from the result was no longer owned by that claim.
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
BEGIN
    -- One lock order for every multi-row writer of running jobs: ascending id.
    PERFORM 1 FROM {schema}.jobs j
    WHERE j.id = ANY(p_ids) AND j.status = 'running'
    ORDER BY j.id
    FOR UPDATE;
    WITH written AS (
        UPDATE {schema}.jobs j
        SET status = f.status,
            output = CASE WHEN f.status = 'completed' THEN f.output::jsonb ELSE j.output END,
            run_at = CASE WHEN f.status = 'pending' THEN now() + make_interval(secs => f.delay)
                          ELSE j.run_at END,
            last_error = coalesce(f.error::jsonb, j.last_error),
            attempts = j.attempts - f.refund,
            deferrals = j.deferrals + f.deferred,
            finished_at = CASE WHEN f.status = 'pending' THEN NULL ELSE now() END,
            lock_token = NULL, locked_until = NULL
        FROM unnest(p_ids, p_tokens, p_statuses, p_outputs, p_delays, p_errors, p_refunds,
                    p_deferred) AS f(id, token, status, output, delay, error, refund, deferred)
        WHERE j.id = f.id AND j.lock_token = f.token AND j.status = 'running'
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
    -- BullMQ does at completion. Reads the newest n + 100 rows through jobs_finished_idx, so a
    -- long history costs nothing; a larger excess is left to the GC.
    IF trim_queues IS NOT NULL THEN
        DELETE FROM {schema}.jobs j
        USING (
            SELECT t.id
            FROM (SELECT u.q, u.s, max(u.k) AS k
                  FROM unnest(trim_queues, trim_states, trim_keep) AS u(q, s, k)
                  GROUP BY u.q, u.s) g,
            LATERAL (
                SELECT newest.id, newest.keep,
                       row_number() OVER (ORDER BY newest.finished_at DESC, newest.id DESC) AS rank
                FROM (SELECT h.id, h.finished_at, (h.retention -> h.status ->> 'count')::int AS keep
                      FROM {schema}.jobs h
                      WHERE h.queue = g.q AND h.status = g.s AND h.finished_at IS NOT NULL
                      ORDER BY h.finished_at DESC, h.id DESC
                      LIMIT g.k + 100) newest
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
