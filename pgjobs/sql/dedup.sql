-- Time-bound deduplication holds (migration 0006). Every statement runs inside the enqueue's
-- transaction, after lock_dedup_hold has locked the key's row.

-- name: lock_dedup_hold
-- Lock (creating if needed) the hold of key $3 in queue $1 for tenant $2; returns who holds it
-- and whether the hold is still running.
INSERT INTO {schema}.dedup_holds AS h (queue, tenant, key, job_id, expires_at)
VALUES ($1, coalesce($2::text, ''), $3, NULL, '-infinity')
ON CONFLICT (queue, tenant, key) DO UPDATE SET queue = h.queue
RETURNING h.job_id, h.expires_at > now() AS held;

-- name: set_dedup_hold
-- The key now belongs to job $4 for $5 seconds.
UPDATE {schema}.dedup_holds
SET job_id = $4, expires_at = now() + make_interval(secs => $5::float8)
WHERE queue = $1 AND tenant = coalesce($2::text, '') AND key = $3;

-- name: extend_dedup_hold
UPDATE {schema}.dedup_holds
SET expires_at = now() + make_interval(secs => $4::float8)
WHERE queue = $1 AND tenant = coalesce($2::text, '') AND key = $3;

-- name: remove_delayed_holder
-- Debounce: delete the holder $1 only while it has not started (delayed, first attempt, and
-- outside any flow). Returns its id when it was removed.
DELETE FROM {schema}.jobs
WHERE id = $1 AND status = 'pending' AND attempts = 0 AND run_at > now() AND flow_id IS NULL
RETURNING id;

-- name: dedup_holder
-- The job holding key $3 of queue $1 for tenant $2: an unexpired hold, else an in-flight job.
SELECT coalesce(
    (SELECT job_id FROM {schema}.dedup_holds
     WHERE queue = $1 AND tenant = coalesce($2::text, '') AND key = $3 AND expires_at > now()),
    (SELECT id FROM {schema}.jobs
     WHERE queue = $1 AND dedup_key = $3 AND coalesce(tenant, '') = coalesce($2::text, '')
       AND status IN ('pending', 'running')));

-- name: release_dedup_key
-- Free key $3 of queue $1 for tenant $2 now: the hold goes and an in-flight holder lets go of
-- it. Returns how many things held it.
WITH hold AS (
    DELETE FROM {schema}.dedup_holds
    WHERE queue = $1 AND tenant = coalesce($2::text, '') AND key = $3 AND expires_at > now()
    RETURNING 1
),
flight AS (
    UPDATE {schema}.jobs SET dedup_key = NULL
    WHERE queue = $1 AND dedup_key = $3 AND coalesce(tenant, '') = coalesce($2::text, '')
      AND status IN ('pending', 'running')
    RETURNING 1
)
SELECT (SELECT count(*) FROM hold) + (SELECT count(*) FROM flight);

-- name: gc_dedup_holds
-- Expired holds, in one pass (the GC).
WITH gone AS (DELETE FROM {schema}.dedup_holds WHERE expires_at < now() RETURNING 1)
SELECT count(*) FROM gone;
