-- Schedules: cron or interval, typed, upserted by name. Emission is decided by locking due rows
-- with SKIP LOCKED and advancing next_run_at in the transaction that enqueues the job; the
-- emitted job also carries a job key made of the schedule name and tick, so even a replayed
-- emission cannot make a second job for one tick. A materialized schedule (schedules.materialized)
-- instead keeps its next run as a pending job, replaced under the schedule's row lock.

-- name: upsert_schedule
INSERT INTO {schema}.schedules AS s (name, kind, payload, options, cron, every_seconds, timezone,
                                     start_at, end_at, emission_limit, next_run_at, emitted,
                                     materialized)
VALUES ($1, $2, $3::text::jsonb, $4::text::jsonb, $5, $6, $7, $8, $9, $10, $11, $13, $14)
ON CONFLICT (name) DO UPDATE SET
    kind = excluded.kind, payload = excluded.payload, options = excluded.options,
    cron = excluded.cron, every_seconds = excluded.every_seconds, timezone = excluded.timezone,
    start_at = excluded.start_at, end_at = excluded.end_at,
    emission_limit = excluded.emission_limit, materialized = excluded.materialized,
    paused_at = NULL,  -- a schedule redefined runs again
    next_run_at = CASE WHEN s.emission_limit IS NULL OR excluded.emission_limit IS NULL
                            OR s.emitted < excluded.emission_limit
                       THEN excluded.next_run_at END,
    updated_at = now()
RETURNING name, next_run_at, emitted, pending_job_id, (xmax = 0) AS created,
          pg_notify($12, '');

-- name: list_schedules
SELECT name, kind, payload, options, cron, every_seconds, timezone, start_at, end_at,
       emission_limit, emitted, next_run_at, last_run_at, materialized, pending_job_id,
       paused_at
FROM {schema}.schedules ORDER BY name;

-- name: get_schedule
SELECT name, kind, payload, options, cron, every_seconds, timezone, start_at, end_at,
       emission_limit, emitted, next_run_at, last_run_at, materialized, pending_job_id,
       paused_at
FROM {schema}.schedules WHERE name = $1;

-- name: lock_schedule
-- A schedule, locked until the transaction ends (advancing or replacing its pending run).
SELECT name, kind, payload, options, cron, every_seconds, timezone, start_at, end_at,
       emission_limit, emitted, next_run_at, last_run_at, materialized, pending_job_id,
       paused_at,
       now() AS db_now
FROM {schema}.schedules WHERE name = $1
FOR UPDATE;

-- name: set_pending_run
-- The materialized schedule $1 now waits on job $2 for its run at $3 (both NULL: no run left);
-- $4 iterations were added; $5, when given, is the run just started.
UPDATE {schema}.schedules
SET pending_job_id = $2, next_run_at = $3, emitted = emitted + $4,
    last_run_at = coalesce($5, last_run_at), updated_at = now()
WHERE name = $1;

-- name: mark_schedule_run
-- Job $1 is a run of materialized schedule $2 (the worker that starts it creates the next).
UPDATE {schema}.jobs SET schedule = $2 WHERE id = $1;

-- name: release_run_key
-- Job $1, a run of materialized schedule $2 that has started (running or finished), gives up
-- its job key $3 to the schedule's new run at the same tick (Schedules.upsert's
-- take_started_tick); it keeps its status and its writes, keyless. No row: it is not such a
-- run (or was put back to pending meanwhile), and keeps the key.
UPDATE {schema}.jobs SET job_key = NULL
WHERE id = $1 AND schedule = $2 AND job_key = $3 AND status <> 'pending'
RETURNING id;

-- name: remove_unstarted_job
-- Delete job $1 if it has not started (a pending run replaced by an upsert); with $2 (a
-- priority), not if it is due, of that priority, in a paused queue (Schedules.upsert's
-- keep_waiting_run).
DELETE FROM {schema}.jobs j
WHERE j.id = $1 AND j.status = 'pending' AND j.attempts = 0
  AND NOT ($2::int IS NOT NULL AND j.priority = $2::int
           AND (j.pending_deps = 0 OR NOT j.waits)
           AND j.run_at <= now()
           AND EXISTS (SELECT FROM {schema}.queue_settings q WHERE q.queue = j.queue AND q.paused))
RETURNING j.id;

-- name: remove_schedule
-- Remove schedule $1 and, for a materialized one, its pending run unless it has started.
WITH removed AS (
    DELETE FROM {schema}.schedules WHERE name = $1 RETURNING name, pending_job_id
),
unstarted AS (
    DELETE FROM {schema}.jobs j USING removed r
    WHERE j.id = r.pending_job_id AND j.status = 'pending' AND j.attempts = 0
    RETURNING j.id
)
SELECT name, (SELECT count(*) FROM unstarted) AS runs_removed FROM removed;

-- name: due_schedules
-- Lock due schedules of the kinds $2 this emitter knows; another emitter running at the same
-- time skips them (and one that does not know a kind leaves it to one that does).
SELECT name, kind, payload, options, cron, every_seconds, timezone, start_at, end_at,
       emission_limit, emitted, next_run_at, now() AS db_now
FROM {schema}.schedules
WHERE next_run_at IS NOT NULL AND next_run_at <= now() AND kind = ANY($2::text[])
  AND NOT materialized AND paused_at IS NULL
ORDER BY next_run_at
LIMIT $1
FOR UPDATE SKIP LOCKED;

-- name: advance_schedule
UPDATE {schema}.schedules
SET next_run_at = $2, last_run_at = $3, emitted = emitted + $4, updated_at = now()
WHERE name = $1;

-- name: next_schedule_due
SELECT extract(epoch FROM min(next_run_at) - now())::float8 FROM {schema}.schedules
WHERE next_run_at IS NOT NULL AND NOT materialized AND paused_at IS NULL;

-- name: pause_schedule
-- Schedule $1 (locked by lock_schedule) is paused: no pending run (its unstarted one, $2 of
-- them, was removed and is no longer counted as made); next_run_at keeps the run it would
-- have made.
UPDATE {schema}.schedules
SET paused_at = now(), pending_job_id = NULL, emitted = emitted - $2, updated_at = now()
WHERE name = $1;

-- name: notify_schedules
-- Wake the schedulers (an empty payload on the jobs channel, as upsert_schedule sends).
SELECT pg_notify($1, '');

-- name: run_schedule_now
-- Schedule $1, not materialized, running and with a run left: its next run is due now (the
-- scheduler emits it as any due tick, then goes on from the tick after now); $2 the channel
-- that wakes the schedulers. Returns the run it replaced.
UPDATE {schema}.schedules s SET next_run_at = now(), updated_at = now()
FROM (SELECT name, next_run_at FROM {schema}.schedules WHERE name = $1 FOR UPDATE) o
WHERE s.name = o.name AND NOT s.materialized AND s.paused_at IS NULL
  AND s.next_run_at IS NOT NULL
RETURNING o.next_run_at AS replaced, pg_notify($2, '');

-- name: resume_schedule
-- Schedule $1 (locked) runs again, next at $2.
UPDATE {schema}.schedules SET paused_at = NULL, next_run_at = $2, updated_at = now()
WHERE name = $1;

-- name: stranded_schedules
-- Materialized schedules of kinds $1 whose pending run has started, finished or vanished
-- without the next run being made (the worker that started it died meanwhile).
SELECT s.name, s.pending_job_id FROM {schema}.schedules s
LEFT JOIN {schema}.jobs j ON j.id = s.pending_job_id
WHERE s.materialized AND s.pending_job_id IS NOT NULL AND s.kind = ANY($1::text[])
  AND (j.id IS NULL OR j.status <> 'pending');

-- name: retime_schedule
-- Schedule $1 (locked) repeats on cron $2 or every $3 seconds, in zone $4, next at $5.
UPDATE {schema}.schedules
SET cron = $2, every_seconds = $3, timezone = $4, next_run_at = $5, updated_at = now()
WHERE name = $1;

-- name: retime_pending_run
-- The pending run $1 of a schedule (not started) moves to $2 under job key $3: the same job,
-- re-timed. Returns it; no row when it has started meanwhile or is gone.
UPDATE {schema}.jobs SET run_at = $2, job_key = $3
WHERE id = $1 AND status = 'pending' AND attempts = 0
RETURNING id;
