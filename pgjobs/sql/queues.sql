-- Queue settings: one row per queue that has any. Enforced inside claim_jobs.

-- name: upsert_queue_setting
-- Set one group of settings of queue $1 and wake its workers ($9: channel). Columns not named
-- by $2 keep their value.
INSERT INTO {schema}.queue_settings AS qs (queue, paused, concurrency, group_concurrency,
                                           rate_limit, rate_period, limited_until, max_stalls)
VALUES ($1, coalesce($3, false), $4, $5, $6, $7, $8, $10)
ON CONFLICT (queue) DO UPDATE SET
    paused = CASE WHEN 'paused' = ANY($2::text[]) THEN coalesce($3, false) ELSE qs.paused END,
    concurrency = CASE WHEN 'concurrency' = ANY($2::text[]) THEN $4 ELSE qs.concurrency END,
    group_concurrency = CASE WHEN 'group_concurrency' = ANY($2::text[]) THEN $5
                             ELSE qs.group_concurrency END,
    rate_limit = CASE WHEN 'rate' = ANY($2::text[]) THEN $6 ELSE qs.rate_limit END,
    rate_period = CASE WHEN 'rate' = ANY($2::text[]) THEN $7 ELSE qs.rate_period END,
    -- A new limit starts a new window; setting the same limit again (every worker that starts
    -- with a limiter does) must not, or each start would admit a fresh window's worth.
    window_start = CASE WHEN 'rate' = ANY($2::text[])
                             AND (qs.rate_limit, qs.rate_period) IS DISTINCT FROM ($6, $7)
                        THEN NULL ELSE qs.window_start END,
    window_count = CASE WHEN 'rate' = ANY($2::text[])
                             AND (qs.rate_limit, qs.rate_period) IS DISTINCT FROM ($6, $7)
                        THEN 0 ELSE qs.window_count END,
    limited_until = CASE WHEN 'limited_until' = ANY($2::text[]) THEN $8 ELSE qs.limited_until END,
    max_stalls = CASE WHEN 'max_stalls' = ANY($2::text[]) THEN $10 ELSE qs.max_stalls END,
    updated_at = now()
RETURNING queue, pg_notify($9, queue);

-- name: limit_queue_for
-- Hand out nothing from queue $1 for $2 seconds (a manual rate limit).
INSERT INTO {schema}.queue_settings AS qs (queue, limited_until)
VALUES ($1, now() + make_interval(secs => $2::float8))
ON CONFLICT (queue) DO UPDATE SET limited_until = excluded.limited_until, updated_at = now()
RETURNING limited_until;

-- name: queue_settings
-- The settings of queues $1 that have any, with the window their workers with a rate limit of
-- their own share (worker_windows; a queue may have that window and no settings row).
SELECT q.queue, coalesce(qs.paused, false) AS paused, qs.concurrency, qs.group_concurrency,
       qs.rate_limit, qs.rate_period, qs.limited_until, qs.window_start,
       coalesce(qs.window_count, 0) AS window_count, qs.max_stalls,
       ww.window_end AS worker_window_end, coalesce(ww.window_count, 0) AS worker_window_count
FROM unnest($1::text[]) AS q(queue)
LEFT JOIN {schema}.queue_settings qs ON qs.queue = q.queue
LEFT JOIN {schema}.worker_windows ww ON ww.queue = q.queue
WHERE qs.queue IS NOT NULL OR ww.queue IS NOT NULL
ORDER BY q.queue;

-- name: worker_seen
-- Worker $1 is alive (upserted at start and with every heartbeat). Committed without waiting
-- for the WAL flush, like the heartbeat: a lost report only hides a worker for one beat.
INSERT INTO {schema}.workers AS w (id, name, host, pid, queues, concurrency, running, heartbeat)
SELECT $1, $2, $3, $4, $5::text[], $6, $7, $8
FROM (SELECT set_config('synchronous_commit', 'off', true)) AS relaxed
ON CONFLICT (id) DO UPDATE SET running = excluded.running, last_seen = now();

-- name: queue_gauges
-- The in-flight jobs of queues $1 (NULL: every queue) by state (ready, delayed,
-- waiting_children, running), with the seconds the oldest of each state has been due (a LIFO
-- job's mirrored run_at counts from its creation): queue depth and lag for telemetry and the
-- dashboard's Prometheus endpoint. Reads the in-flight partial indexes (fragments.sql).
SELECT j.queue,
       CASE WHEN j.status = 'running' THEN 'running'
            WHEN j.pending_deps > 0 AND j.waits THEN 'waiting_children'
            WHEN j.run_at > now() THEN 'delayed'
            ELSE 'ready' END AS state,
       count(*)::bigint AS jobs,
       greatest(extract(epoch FROM now() - min(greatest(j.run_at, j.created_at))), 0)::float8
           AS lag
FROM {schema}.jobs j
WHERE ($1::text[] IS NULL OR j.queue = ANY($1::text[])) AND {fragment:in_flight}
GROUP BY 1, 2
ORDER BY 1, 2;

-- name: worker_gone
-- Also without waiting for the flush: a lost delete leaves a row list_workers soon ignores.
DELETE FROM {schema}.workers
WHERE id = $1 AND (SELECT set_config('synchronous_commit', 'off', true)) IS NOT NULL;

-- name: list_workers
-- Workers seen within three of their heartbeat intervals (the others died), of queue $1 if
-- given.
SELECT id, name, host, pid, queues, concurrency, running, started_at, last_seen
FROM {schema}.workers
WHERE last_seen >= now() - make_interval(secs => 3 * heartbeat)
  AND ($1::text IS NULL OR $1::text = ANY(queues))
ORDER BY started_at, id;

-- name: gc_workers
-- Rows of workers that died without saying so, an hour after they were last seen.
WITH gone AS (
    DELETE FROM {schema}.workers WHERE last_seen < now() - interval '1 hour' RETURNING 1
)
SELECT count(*) FROM gone;

-- name: queue_description
-- The label and dialect of queue $1 (no row: none recorded).
SELECT label, dialect FROM {schema}.queue_settings WHERE queue = $1;

-- name: describe_queue
-- Record the label $2 and dialect $3 of queue $1 (a row of defaults if it had no settings).
INSERT INTO {schema}.queue_settings AS qs (queue, label, dialect) VALUES ($1, $2, $3)
ON CONFLICT (queue) DO UPDATE SET label = excluded.label, dialect = excluded.dialect,
                                  updated_at = now()
WHERE (qs.label, qs.dialect) IS DISTINCT FROM (excluded.label, excluded.dialect);

-- name: queue_descriptions
-- Every queue with a label or a dialect recorded (describe_queue), by name.
SELECT queue, label, dialect FROM {schema}.queue_settings
WHERE label IS NOT NULL OR dialect IS NOT NULL ORDER BY queue;
