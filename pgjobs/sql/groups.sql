-- Groups of a queue (table job_groups, migration 0006; the claim's rotation: schema/groups.sql).
-- A change of a group first locks its queue's settings row (lock_grouped_queue), as each claim
-- of a grouped queue does: a change and a claim of the same queue never overlap, so a claim
-- sees a pause or a limit either whole or not at all.

-- name: lock_grouped_queue
-- The settings row of queue $1, marked grouped and as having group settings (made if
-- missing), locked until the transaction ends.
INSERT INTO {schema}.queue_settings AS qs (queue, grouped, group_settings) VALUES ($1, true, true)
ON CONFLICT (queue) DO UPDATE SET grouped = true, group_settings = true
RETURNING qs.queue;

-- name: pause_group
-- Pause group $2 of queue $1 (its row made if it has none yet); a row when it was not paused.
INSERT INTO {schema}.job_groups AS g (queue, group_key, paused_at) VALUES ($1, $2, now())
ON CONFLICT (queue, group_key) DO UPDATE SET paused_at = now() WHERE g.paused_at IS NULL
RETURNING g.group_key;

-- name: resume_group
-- Resume group $2 of queue $1 and wake the queue's workers ($3: channel); a row when it was
-- paused.
UPDATE {schema}.job_groups g SET paused_at = NULL
WHERE g.queue = $1 AND g.group_key = $2 AND g.paused_at IS NOT NULL
RETURNING g.group_key, pg_notify($3, $1);

-- name: set_group_limits
-- Group $2 of queue $1: its own cap ($4, when $3 names 'concurrency'), its own rate limit ($5
-- starts per $6 seconds, when $3 names 'rate'; a new limit starts a new window), or nothing
-- started before now() + $7 seconds (when $3 names 'limited_until'; NULL ends it). Wakes the
-- queue's workers ($8: channel).
INSERT INTO {schema}.job_groups AS g (queue, group_key, concurrency, rate_limit, rate_period,
                                      limited_until)
VALUES ($1, $2, $4, $5, $6, now() + make_interval(secs => $7::float8))
ON CONFLICT (queue, group_key) DO UPDATE SET
    concurrency = CASE WHEN 'concurrency' = ANY($3::text[]) THEN $4 ELSE g.concurrency END,
    rate_limit = CASE WHEN 'rate' = ANY($3::text[]) THEN $5 ELSE g.rate_limit END,
    rate_period = CASE WHEN 'rate' = ANY($3::text[]) THEN $6 ELSE g.rate_period END,
    window_start = CASE WHEN 'rate' = ANY($3::text[])
                             AND (g.rate_limit, g.rate_period) IS DISTINCT FROM ($5, $6)
                        THEN NULL ELSE g.window_start END,
    window_count = CASE WHEN 'rate' = ANY($3::text[])
                             AND (g.rate_limit, g.rate_period) IS DISTINCT FROM ($5, $6)
                        THEN 0 ELSE g.window_count END,
    limited_until = CASE WHEN 'limited_until' = ANY($3::text[])
                         THEN now() + make_interval(secs => $7::float8)
                         ELSE g.limited_until END
RETURNING g.group_key, pg_notify($8, $1);

-- name: list_groups
-- The groups of queue $1 (only group $2, unless NULL; at most $3), in rotation order (the next served
-- first: the key after the queue's cursor), with their settings, what applied when a claim last served them, and their jobs:
-- ready (pending, due, no prerequisite holding it), delayed (pending, not yet due) and running.
-- Each count reads the group's own index range (jobs_group_claim_idx, jobs_running_idx).
SELECT g.group_key, g.paused_at, g.limited_until, g.concurrency, g.rate_limit, g.rate_period,
       g.window_start, g.window_count, g.window_limit, g.window_period, g.seen_cap,
       now() AS db_now,
       (SELECT count(*) FROM {schema}.jobs j
        WHERE j.queue = g.queue AND j.group_key = g.group_key AND j.status = 'pending'
          AND (j.pending_deps = 0 OR NOT j.waits) AND j.run_at <= now()) AS ready,
       (SELECT count(*) FROM {schema}.jobs j
        WHERE j.queue = g.queue AND j.group_key = g.group_key AND j.status = 'pending'
          AND (j.pending_deps = 0 OR NOT j.waits) AND j.run_at > now()) AS delayed,
       (SELECT count(*) FROM {schema}.jobs r
        WHERE r.queue = g.queue AND r.status = 'running' AND r.group_key = g.group_key) AS running
FROM {schema}.job_groups g
LEFT JOIN {schema}.queue_settings qs ON qs.queue = g.queue
WHERE g.queue = $1 AND ($2::text IS NULL OR g.group_key = $2)
ORDER BY g.group_key <= coalesce(qs.group_cursor, ''), g.group_key
LIMIT $3;

-- name: reset_group
-- Clear the pause and the limits of group $2 of queue $1; a row when it has a row. The row
-- itself stays: a job being added to the group may have found it there (note_job_group), and
-- a group with no job costs the rotation one look.
UPDATE {schema}.job_groups g
SET paused_at = NULL, concurrency = NULL, rate_limit = NULL, rate_period = NULL,
    limited_until = NULL, window_start = NULL, window_count = 0
WHERE g.queue = $1 AND g.group_key = $2
RETURNING g.group_key;

-- name: lock_group
-- Lock the row of group $2 of queue $1 (made if missing) until the transaction ends: adds that
-- bound the group's size (BullMQ Pro's maxSize) take it in turn.
INSERT INTO {schema}.job_groups AS g (queue, group_key) VALUES ($1, $2)
ON CONFLICT (queue, group_key) DO UPDATE SET queue = g.queue
RETURNING g.group_key;

-- name: group_ready_count
-- The ready jobs of group $2 of queue $1 (pending, due, held by no prerequisite). After
-- lock_group, in a statement of its own: its snapshot then holds every add that took the lock
-- before. Due by this statement's start, not the transaction's: an add that took the lock
-- first may have begun after this transaction, its job due at its own start.
SELECT count(*) FROM {schema}.jobs j
WHERE j.queue = $1 AND j.group_key = $2 AND j.status = 'pending'
  AND (j.pending_deps = 0 OR NOT j.waits) AND j.run_at <= statement_timestamp();
