-- Maintenance run as ordinary jobs (pgjobs.maintenance): GC and the metrics sweep. Each takes
-- a transaction-scoped advisory lock so that one instance runs at a time fleet-wide.

-- name: try_lock
SELECT pg_try_advisory_xact_lock(hashtextextended($1::text, 0));

-- name: gc_jobs
-- Delete up to $4 finished jobs that their own retention rule ({"count", "age"} per status) or
-- the global policy ($1/$2/$3: seconds to keep completed/dead/cancelled; NULL keeps) lets go,
-- among those in jobs_live: a history partition holds only completed jobs without a rule of
-- their own, which leave with their day's partition (drop_history_day), so GC's reads and
-- deletes stay proportional to jobs_live, not to the history.
-- Never a job a pending or running dependent still reads (but through a satisfied edge, which
-- keeps a copy of the output: job_edges_integrity.sql), and never one the metrics sweep has
-- not counted yet (metrics outlive GC). Housekeeping: no 'removed' events (job_events.sql;
-- the mark is set while the statement runs, before its trigger fires).
WITH quiet AS MATERIALIZED (
    SELECT {schema}.quiet_next_removal() AS marked
),
finished AS (
    SELECT j.id, j.status, j.finished_at, j.retention -> j.status AS rule,
           row_number() OVER (PARTITION BY j.queue, j.status
                              ORDER BY j.finished_at DESC, j.id DESC) AS newest_rank
    FROM {schema}.jobs_live j
    WHERE j.finished_at IS NOT NULL AND j.status IN ('completed', 'dead', 'cancelled')
),
doomed AS (
    SELECT f.id FROM finished f
    WHERE (
            (f.rule ? 'count' AND f.newest_rank > (f.rule ->> 'count')::int)
         OR (f.rule ? 'age' AND f.finished_at < now() - make_interval(secs => (f.rule ->> 'age')::float8))
         OR (f.status = 'completed' AND $1::float8 IS NOT NULL AND f.finished_at < now() - make_interval(secs => $1))
         OR (f.status = 'dead' AND $2::float8 IS NOT NULL AND f.finished_at < now() - make_interval(secs => $2))
         OR (f.status = 'cancelled' AND $3::float8 IS NOT NULL AND f.finished_at < now() - make_interval(secs => $3))
          )
      AND NOT EXISTS (SELECT FROM {schema}.job_edges e JOIN {schema}.jobs d ON d.id = e.dependent_id
                      WHERE e.prerequisite_id = f.id AND d.status IN ('pending', 'running'))
      AND f.finished_at < coalesce((SELECT swept_until FROM {schema}.metrics_watermark), 'infinity')
      AND (SELECT marked FROM quiet)
    ORDER BY f.id
    LIMIT $4
)
DELETE FROM {schema}.jobs j USING doomed WHERE j.id = doomed.id AND j.history_day = 'infinity'
RETURNING j.id;

-- name: history_batch
-- Up to $2 completed jobs of jobs_live to move to history: finished more than $1 seconds ago,
-- oldest first in each queue, without a job key, a retention rule of their own or a pending or
-- running dependent (history.sql says why these stay), each with the UTC day it finished.
-- Read queue by queue through jobs_finished_idx (the queues from finished_counts), so the jobs
-- that stay are never read past. Locked, skipping locked ones: a move never waits for a job's
-- other writer.
SELECT m.id, m.day
FROM (SELECT DISTINCT c.queue FROM {schema}.finished_counts c
      WHERE c.history_day = 'infinity' AND c.status = 'completed') q
CROSS JOIN LATERAL (
    SELECT j.id, (j.finished_at AT TIME ZONE 'UTC')::date AS day
    FROM {schema}.jobs_live j
    WHERE j.queue = q.queue AND j.status = 'completed'
      AND j.finished_at < now() - make_interval(secs => $1::float8) AND j.job_key IS NULL
      AND j.retention -> 'completed' IS NULL
      AND NOT EXISTS (SELECT FROM {schema}.job_edges e
                      JOIN {schema}.jobs_live d ON d.id = e.dependent_id
                      WHERE e.prerequisite_id = j.id AND d.status IN ('pending', 'running'))
    ORDER BY j.finished_at
    LIMIT $2
    FOR UPDATE OF j SKIP LOCKED
) m
LIMIT $2;

-- name: create_history_partition
SELECT {schema}.create_history_partition($1::date);

-- name: move_to_history
-- Move jobs $1 to the history partitions of days $2 (history.sql); returns how many moved.
WITH moved AS (
    UPDATE {schema}.jobs j SET history_day = b.day
    FROM unnest($1::bigint[], $2::date[]) AS b(id, day)
    WHERE j.id = b.id AND j.history_day = 'infinity' AND j.finished_at IS NOT NULL
    RETURNING j.id
)
SELECT count(*) FROM moved;

-- name: droppable_history_days
-- The days whose history partition may go: the whole day finished more than $1 seconds ago,
-- and counted by the metrics sweep (metrics outlive history, as they outlive GC's deletes).
SELECT d.day FROM {schema}.history_days() AS d(day)
WHERE (d.day + 1)::timestamp AT TIME ZONE 'UTC' <= now() - make_interval(secs => $1::float8)
  AND (d.day + 1)::timestamp AT TIME ZONE 'UTC'
      <= coalesce((SELECT swept_until FROM {schema}.metrics_watermark), 'infinity')
ORDER BY d.day;

-- name: set_lock_timeout
-- For the rest of the transaction: wait at most $1 milliseconds for a lock.
SELECT set_config('lock_timeout', $1::int::text, true);

-- name: drop_history_day
-- Drop day $1's history partition (history.sql); how many jobs it held.
SELECT {schema}.drop_history_day($1::date);

-- name: gc_flows
-- Flow rows whose jobs are all gone, created more than $1 seconds ago.
DELETE FROM {schema}.flows f
WHERE f.created_at < now() - make_interval(secs => $1::float8)
  AND NOT EXISTS (SELECT FROM {schema}.jobs j WHERE j.flow_id = f.id)
RETURNING f.id;

-- name: sweep_window
-- The next half-open window [from, to) to count: from the watermark (first run: the oldest
-- finished job) up to now minus the settle lag $1, so late commits land before their window.
SELECT coalesce((SELECT swept_until FROM {schema}.metrics_watermark),
                (SELECT date_trunc('minute', min(finished_at), 'UTC') FROM {schema}.jobs
                 WHERE finished_at IS NOT NULL)) AS window_from,
       now() - make_interval(secs => $1::float8) AS window_to;

-- name: sweep_count
-- Add the finished jobs of [$1, $2) to their minute buckets; each row is in exactly one window.
INSERT INTO {schema}.metrics_rollup AS m (granularity, queue, bucket, completed, dead, cancelled)
SELECT 'minute', j.queue, date_trunc('minute', j.finished_at, 'UTC'),
       count(*) FILTER (WHERE j.status = 'completed'),
       count(*) FILTER (WHERE j.status = 'dead'),
       count(*) FILTER (WHERE j.status = 'cancelled')
FROM {schema}.jobs j
WHERE j.finished_at >= $1 AND j.finished_at < $2 AND j.status IN ('completed', 'dead', 'cancelled')
GROUP BY 2, 3
ON CONFLICT (granularity, queue, bucket) DO UPDATE SET
    completed = m.completed + excluded.completed,
    dead = m.dead + excluded.dead,
    cancelled = m.cancelled + excluded.cancelled
RETURNING m.queue;

-- name: sweep_advance
INSERT INTO {schema}.metrics_watermark (singleton, swept_until) VALUES (true, $1)
ON CONFLICT (singleton) DO UPDATE SET swept_until = excluded.swept_until;

-- name: downsample
-- Fold minute rows of whole (UTC) days older than $1 seconds into day rows, then drop them.
WITH old AS (
    DELETE FROM {schema}.metrics_rollup
    WHERE granularity = 'minute'
      AND bucket < date_trunc('day', now() - make_interval(secs => $1::float8), 'UTC')
    RETURNING queue, bucket, completed, dead, cancelled
)
INSERT INTO {schema}.metrics_rollup AS m (granularity, queue, bucket, completed, dead, cancelled)
SELECT 'day', queue, date_trunc('day', bucket, 'UTC'), sum(completed), sum(dead), sum(cancelled)
FROM old GROUP BY 2, 3
ON CONFLICT (granularity, queue, bucket) DO UPDATE SET
    completed = m.completed + excluded.completed,
    dead = m.dead + excluded.dead,
    cancelled = m.cancelled + excluded.cancelled
RETURNING m.bucket;

-- name: dead_tuples
-- Live and dead tuples of the engine's churning tables, from the cumulative statistics (which
-- lag by up to a few seconds).
SELECT relname AS table_name, n_live_tup AS live, n_dead_tup AS dead
FROM pg_stat_user_tables
WHERE schemaname = $1 AND relname = ANY($2::text[])
ORDER BY relname;

-- name: vacuum_jobs_live
VACUUM (ANALYZE) {schema}.jobs_live;

-- name: vacuum_job_events
VACUUM (ANALYZE) {schema}.job_events;

-- name: vacuum_dedup_holds
VACUUM (ANALYZE) {schema}.dedup_holds;

-- name: vacuum_queue_settings
VACUUM (ANALYZE) {schema}.queue_settings;

-- name: vacuum_worker_windows
VACUUM (ANALYZE) {schema}.worker_windows;
