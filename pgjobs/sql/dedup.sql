-- Time-bound deduplication holds (table dedup_holds). Every statement runs inside the enqueue's
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

-- name: take_dedup_hold
-- The key now belongs to job $4, until the hold's expiry (BullMQ's SET KEEPTTL).
UPDATE {schema}.dedup_holds
SET job_id = $4
WHERE queue = $1 AND tenant = coalesce($2::text, '') AND key = $3;

-- name: remove_delayed_holder
-- Debounce: delete the holder $1 only while it has not started (delayed, first attempt, and
-- outside any flow). Returns its id and job key when it was removed.
DELETE FROM {schema}.jobs
WHERE id = $1 AND status = 'pending' AND attempts = 0 AND run_at > now() AND flow_id IS NULL
RETURNING id, job_key;

-- name: remove_delayed_dedup_holder
-- Debounce of an in-flight key: delete job $1 only while it holds key $3 of queue $2 for
-- tenant $4 and has not started (as remove_delayed_holder). Returns its id and job key.
DELETE FROM {schema}.jobs
WHERE id = $1 AND queue = $2 AND dedup_key = $3 AND coalesce(tenant, '') = coalesce($4::text, '')
  AND status = 'pending' AND attempts = 0 AND run_at > now() AND flow_id IS NULL
RETURNING id, job_key;

-- name: key_holder_of
-- The job holding job key $3 (any status) or dedup key $4 (in flight) of queue $1 for tenant
-- $2, the job key's first (enqueue_job.sql, key_holder): its id, keys and status.
SELECT j.id, j.job_key, j.dedup_key, j.status
FROM {schema}.key_holder($1, $2, $3, $4) h JOIN {schema}.jobs j ON j.id = h.id;

-- name: keep_next_job
-- Keep the job $5.. as the one to enqueue when job $1, holder of key $4 of queue $2 for tenant
-- $3, finishes (table dedup_next), replacing any kept before it; only while $1 is
-- running. The holder's row is locked (KEY SHARE, which does not hold up its lease renewals):
-- a finish writing it waits for this transaction and then enqueues the kept job
-- (finish_jobs.sql); a finish that locked it first makes this statement read it again once
-- it commits, finished, and keep nothing. Returns the holder's id when the job was kept.
-- $5 kind, $6 name, $7 payload, $8 priority, $9 run_at, $10 delay, $11 max_attempts,
-- $12 max_deferrals, $13 backoff, $14 group_key, $15 metadata, $16 job_key, $17 retention,
-- $18 record_events.
WITH holder AS (
    SELECT j.id FROM {schema}.jobs j
    WHERE j.id = $1 AND j.status = 'running'
    FOR KEY SHARE
)
INSERT INTO {schema}.dedup_next AS n (
    queue, tenant, key, holder_id, kind, name, payload, priority, run_at, delay, max_attempts,
    max_deferrals, backoff, group_key, job_tenant, metadata, job_key, retention, record_events)
SELECT $2, coalesce($3::text, ''), $4, h.id, $5, $6, $7::text::jsonb, $8, $9, $10, $11, $12,
       $13::text::jsonb, $14, $3, $15::text::jsonb, $16, $17::text::jsonb, $18
FROM holder h
ON CONFLICT (queue, tenant, key) DO UPDATE
SET holder_id = excluded.holder_id, kind = excluded.kind, name = excluded.name,
    payload = excluded.payload, priority = excluded.priority, run_at = excluded.run_at,
    delay = excluded.delay, max_attempts = excluded.max_attempts,
    max_deferrals = excluded.max_deferrals, backoff = excluded.backoff,
    group_key = excluded.group_key, job_tenant = excluded.job_tenant,
    metadata = excluded.metadata, job_key = excluded.job_key, retention = excluded.retention,
    record_events = excluded.record_events, stored_at = now()
RETURNING n.holder_id;

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
-- Expired holds, and kept jobs whose holder is no longer in flight (removed, or finished
-- otherwise than by its handler: cancelled, failed for good by the stall rescue), in one pass
-- each (the GC).
WITH gone AS (DELETE FROM {schema}.dedup_holds WHERE expires_at < now() RETURNING 1),
orphans AS (
    DELETE FROM {schema}.dedup_next n
    WHERE NOT EXISTS (SELECT FROM {schema}.jobs j
                      WHERE j.id = n.holder_id AND j.status IN ('pending', 'running'))
    RETURNING 1
)
SELECT (SELECT count(*) FROM gone) + (SELECT count(*) FROM orphans);
