-- finish_jobs: write many handler outcomes, each fenced by its lock token, then resolve the
-- dependents, wake the queues that gained claimable work, and apply retention, all in the
-- caller's transaction. Returns the ids written: an id missing from the result was no longer
-- owned by that claim (lease expired and reclaimed, cancelled, purged), and nothing was written
-- for it.
--
-- p_statuses: completed | pending (retry, deferral, given back) | dead. p_delays: seconds from
-- now for a pending outcome; NULL keeps the due time (a job given back unrun keeps its place).
-- p_refunds: attempts given back (a deferral, a job given back); p_deferred: deferrals counted.
-- A job written completed or dead that held a dedup key in flight enqueues the job kept for
-- that key while it ran, if any (dedup_next, enqueue_kept_jobs), in this same transaction.
--
-- A completion is refused for a job that still has counted prerequisites (pending_deps > 0:
-- prerequisites attached while it ran, open or blocked by a failure; BullMQ's "has pending
-- dependencies"): nothing is written for it, it stays running and owned, and its id comes
-- back negated. It is decided on the row as locked below, which attach_prerequisites must
-- lock too to count an edge, so an attach either committed before (and is seen) or waits
-- for this transaction (and finds the job completed).
CREATE OR REPLACE FUNCTION {schema}.finish_jobs(
    p_ids bigint[], p_tokens uuid[], p_statuses text[], p_outputs text[], p_delays float8[],
    p_errors text[], p_refunds int[], p_deferred int[], p_channel text
) RETURNS SETOF bigint LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan SET jit = off AS $fn$
DECLARE
    done_ids     bigint[];
    ended_prerequisites bigint[];
    remove_ids   bigint[];
    done_queues  text[];
    wake_queues  text[];
    trim_queues  text[];
    trim_states  text[];
    trim_keep    int[];
    age_queues   text[];
    age_states   text[];
    age_keep     float8[];
    any_goes     boolean;
    gone_ids     bigint[];
    gone_queues  text[];
    gone_keyed   bigint[];
    keyed_ids    bigint[];
    trimmed      record;
    refused      bigint[];
    dropped      bigint[];
    dropped_queues text[];
BEGIN
    -- One lock order for every multi-row writer of running jobs: ascending id. Only the rows
    -- still held by the given tokens: no other row stays locked while the trim lock is awaited.
    -- Whether one of them goes at once (below) is read as they are locked.
    SELECT coalesce(bool_or(x.goes AND NOT x.refused), false),
           coalesce(array_agg(x.id) FILTER (WHERE x.refused), '{}')
    INTO any_goes, refused
    FROM (SELECT j.id, (j.retention -> f.status ->> 'count')::int = 0 AS goes,
                 f.status = 'completed' AND j.pending_deps > 0 AS refused
          FROM {schema}.jobs j, unnest(p_ids, p_tokens, p_statuses) AS f(id, token, status)
          WHERE j.id = f.id AND j.lock_token = f.token
            AND j.history_day = 'infinity'  -- running: jobs_live (history.sql), pruned when planned
          ORDER BY j.id
          FOR UPDATE OF j) x;
    -- Retention {"count": 0} for the status written, of a job no other depends on: it goes
    -- now (a prerequisite takes the path below, which resolves its dependents first), its
    -- row deleted as it stands rather than first written finished (a second dead version, and
    -- an entry in each index of finished jobs, for a row deleted in the same transaction). Its
    -- 'completed' or 'failed' event is written here as the update trigger writes it
    -- (job_events.sql); the removal itself is housekeeping and writes none. The rows are
    -- those locked above: the same fence by token as the UPDATE below, which then finds them
    -- gone.
    IF any_goes THEN
        PERFORM {schema}.quiet_next_removal();  -- no 'removed' events (job_events.sql)
        WITH gone AS (
            DELETE FROM {schema}.jobs j
            USING unnest(p_ids, p_tokens, p_statuses, p_outputs, p_errors, p_refunds)
                  AS f(id, token, status, output, error, refund)
            WHERE j.id = f.id AND j.lock_token = f.token AND f.status IN ('completed', 'dead')
              AND (j.retention -> f.status ->> 'count')::int = 0 AND NOT j.id = ANY(refused)
              AND NOT EXISTS (SELECT FROM {schema}.job_edges e WHERE e.prerequisite_id = j.id)
            RETURNING j.id, j.queue, j.job_key, j.tenant, j.record_events, j.dedup_key,
                      CASE f.status WHEN 'completed' THEN 'completed' ELSE 'failed' END AS event,
                      f.output::jsonb AS output,
                      coalesce(f.error::jsonb, j.last_error) AS last_error,
                      j.attempts - f.refund AS attempts, j.max_attempts
        ),
        recorded AS (
            INSERT INTO {schema}.job_events (queue, job_id, job_key, tenant, event, prev, data)
            SELECT g.queue, g.id, g.job_key, g.tenant,
                   g.event, 'running',
                   {schema}.outcome_event_data(g.event, g.output, g.last_error, g.attempts,
                                               g.max_attempts)
            FROM gone g
            WHERE g.record_events
            ORDER BY g.id
            RETURNING queue
        ),
        readers AS (
            SELECT count(pg_notify('{schema}_events', q.queue)) AS notified
            FROM (SELECT DISTINCT r.queue FROM recorded r) q
        )
        SELECT array_agg(g.id), array_agg(DISTINCT g.queue),
               array_agg(g.id) FILTER (WHERE g.dedup_key IS NOT NULL)
        INTO gone_ids, gone_queues, gone_keyed
        FROM gone g, readers;
    END IF;
    WITH written AS (
        UPDATE {schema}.jobs j
        SET status = f.status,
            output = CASE WHEN f.status = 'completed' THEN f.output::jsonb ELSE j.output END,
            run_at = CASE WHEN f.status = 'pending'  -- a NULL delay keeps the due time
                          THEN coalesce(now() + make_interval(secs => f.delay), j.run_at)
                          ELSE j.run_at END,
            last_error = coalesce(f.error::jsonb, j.last_error),
            errors = {schema}.with_attempt_error(j.errors, f.error::jsonb),
            attempts = j.attempts - f.refund,
            deferrals = j.deferrals + f.deferred,
            finished_at = CASE WHEN f.status = 'pending' THEN NULL ELSE now() END,
            lock_token = NULL, locked_until = NULL
        FROM unnest(p_ids, p_tokens, p_statuses, p_outputs, p_delays, p_errors, p_refunds,
                    p_deferred) AS f(id, token, status, output, delay, error, refund, deferred)
        WHERE j.id = f.id AND j.lock_token = f.token  -- a token is set only while running
          AND j.history_day = 'infinity' AND NOT j.id = ANY(refused)
        RETURNING j.id, j.status, j.queue, j.retention -> j.status AS rule,
                  j.dedup_key IS NOT NULL AS keyed
    ),
    kept AS (  -- the rule of the status written, read once per row; whether a job depends on it
        SELECT w.id, w.status, w.queue, w.keyed, (w.rule ->> 'count')::int AS keep_count,
               (w.rule ->> 'age')::float8 AS keep_age,
               EXISTS (SELECT FROM {schema}.job_edges e WHERE e.prerequisite_id = w.id)
                   AS prerequisite
        FROM written w
    )
    SELECT array_agg(id),
           array_agg(id) FILTER (WHERE prerequisite AND status <> 'pending'),
           array_agg(id) FILTER (WHERE keep_count = 0),
           array_agg(DISTINCT queue),
           array_agg(DISTINCT queue) FILTER (WHERE status = 'pending'),
           array_agg(queue) FILTER (WHERE keep_count > 0),
           array_agg(status) FILTER (WHERE keep_count > 0),
           array_agg(keep_count) FILTER (WHERE keep_count > 0),
           array_agg(queue) FILTER (WHERE keep_age IS NOT NULL),
           array_agg(status) FILTER (WHERE keep_age IS NOT NULL),
           array_agg(keep_age) FILTER (WHERE keep_age IS NOT NULL),
           array_agg(id) FILTER (WHERE keyed AND status <> 'pending')
    INTO done_ids, ended_prerequisites, remove_ids, done_queues, wake_queues,
         trim_queues, trim_states, trim_keep, age_queues, age_states, age_keep, keyed_ids
    FROM kept;

    IF gone_ids IS NOT NULL THEN
        done_ids := coalesce(done_ids, '{}') || gone_ids;
        done_queues := ARRAY(SELECT DISTINCT q
                             FROM unnest(coalesce(done_queues, '{}') || gone_queues) AS q);
    END IF;
    RETURN QUERY SELECT -r FROM unnest(refused) AS r;
    IF done_ids IS NULL THEN
        RETURN;
    END IF;
    -- Holders of a dedup key that finished: the jobs kept for their keys are enqueued now.
    keyed_ids := coalesce(keyed_ids, '{}') || coalesce(gone_keyed, '{}');
    IF cardinality(keyed_ids) > 0 THEN
        PERFORM {schema}.enqueue_kept_jobs(keyed_ids, p_channel);
    END IF;
    -- Jobs that others depend on (in a flow or by add_dependency) resolve their dependents.
    IF ended_prerequisites IS NOT NULL THEN
        PERFORM {schema}.wake_dependents(ended_prerequisites, false, p_channel);
    END IF;
    -- Retention {"count": 0} of a dead job others depend on: it goes now, a dependent it
    -- blocks released as by its removal, unless a waiting dependent reads its failure
    -- (drop_dead_prerequisites, resolve_dependents.sql).
    IF remove_ids IS NOT NULL AND ended_prerequisites IS NOT NULL THEN
        SELECT array_agg(x) INTO dropped FROM unnest(remove_ids) AS x
        WHERE x = ANY(ended_prerequisites);
        IF dropped IS NOT NULL THEN
            SELECT array_agg(DISTINCT d.queue) INTO dropped_queues
            FROM {schema}.jobs d
            WHERE d.id IN (SELECT {schema}.drop_dead_prerequisites(dropped));
            IF dropped_queues IS NOT NULL THEN
                PERFORM pg_notify(p_channel, q) FROM unnest(dropped_queues) AS q;
            END IF;
        END IF;
    END IF;
    -- A queue with a concurrency cap has a free slot now: wake its workers.
    wake_queues := coalesce(wake_queues, '{}') || ARRAY(
        SELECT qs.queue FROM {schema}.queue_settings qs
        WHERE qs.queue = ANY(done_queues)
          AND (qs.concurrency IS NOT NULL OR qs.group_concurrency IS NOT NULL));
    IF cardinality(wake_queues) > 0 THEN
        PERFORM pg_notify(p_channel, q) FROM unnest(wake_queues) AS q;
    END IF;
    -- Retention {"count": 0}: remove at once, unless a waiting dependent still reads the row
    -- (a satisfied edge keeps a copy of the output instead: job_edges_integrity.sql).
    IF remove_ids IS NOT NULL THEN
        PERFORM {schema}.quiet_next_removal();  -- no 'removed' events (job_events.sql)
        DELETE FROM {schema}.jobs j
        WHERE j.id = ANY(remove_ids)
          AND NOT EXISTS (SELECT FROM {schema}.job_edges e JOIN {schema}.jobs d ON d.id = e.dependent_id
                          WHERE e.prerequisite_id = j.id AND d.status IN ('pending', 'running')
                            AND e.state <> 'satisfied');
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
        PERFORM {schema}.quiet_next_removal();  -- no 'removed' events (job_events.sql)
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
                          WHERE e.prerequisite_id = j.id AND d.status IN ('pending', 'running')
                            AND e.state <> 'satisfied');
    END IF;
    -- Retention {"age": s}: remove the finished jobs of each (queue, status) just written to
    -- whose own rule's age has passed, as BullMQ does at completion (the GC does it too). A call
    -- examines at most the 1,000 most recently expired rows of each (queue, status): those
    -- finished before the shortest age just written, newest first, through jobs_finished_idx.
    -- So it costs that at most however long the history, and a rule's rows are reached as
    -- they expire, even behind older rows other rules keep (rows of a longer rule in between
    -- only delay them until they expire too; the GC takes the rest). Rows another transaction
    -- holds (a purge, a clean, the GC, another finish's trim) are skipped, never waited for:
    -- no lock order to agree on with them, and what is skipped goes at a later finish or by
    -- the GC. A row changed meanwhile is read again as of its change before it is locked, so a
    -- job re-driven since is not finished any more and stays. Never a job a pending or running
    -- dependent still reads (but through a satisfied edge, which keeps a copy of the output:
    -- job_edges_integrity.sql), nor one the metrics sweep has not counted (as the GC).
    IF age_queues IS NOT NULL THEN
        PERFORM {schema}.quiet_next_removal();  -- no 'removed' events (job_events.sql)
        DELETE FROM {schema}.jobs j
        USING (
            SELECT x.id FROM {schema}.jobs x
            WHERE x.id IN (
                    SELECT seen.id
                    FROM (SELECT u.q, u.s, min(u.a) AS a
                          FROM unnest(age_queues, age_states, age_keep) AS u(q, s, a)
                          GROUP BY u.q, u.s) g,
                    LATERAL (SELECT h.id FROM {schema}.jobs h
                             WHERE h.queue = g.q AND h.status = g.s
                               AND h.finished_at IS NOT NULL
                               AND h.finished_at < now() - make_interval(secs => g.a)
                             ORDER BY h.finished_at DESC
                             LIMIT 1000) seen)
              AND x.finished_at
                  < now() - make_interval(secs => (x.retention -> x.status ->> 'age')::float8)
              AND x.finished_at < coalesce((SELECT w.swept_until
                                            FROM {schema}.metrics_watermark w), 'infinity')
            FOR UPDATE OF x SKIP LOCKED
        ) doomed
        WHERE j.id = doomed.id
          AND NOT EXISTS (SELECT FROM {schema}.job_edges e JOIN {schema}.jobs d ON d.id = e.dependent_id
                          WHERE e.prerequisite_id = j.id AND d.status IN ('pending', 'running')
                            AND e.state <> 'satisfied');
    END IF;
    RETURN QUERY SELECT unnest(done_ids);
END
$fn$;
