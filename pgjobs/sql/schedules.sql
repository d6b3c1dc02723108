-- Schedules: cron or interval, typed, upserted by name. Emission is decided by locking due rows
-- with SKIP LOCKED and advancing next_run_at in the transaction that enqueues the job; the
-- emitted job also carries a job key made of the schedule name and tick, so even a replayed
-- emission cannot make a second job for one tick.

-- name: upsert_schedule
INSERT INTO {schema}.schedules AS s (name, kind, payload, options, cron, every_seconds, timezone,
                                     start_at, end_at, emission_limit, next_run_at, emitted)
VALUES ($1, $2, $3::text::jsonb, $4::text::jsonb, $5, $6, $7, $8, $9, $10, $11, $13)
ON CONFLICT (name) DO UPDATE SET
    kind = excluded.kind, payload = excluded.payload, options = excluded.options,
    cron = excluded.cron, every_seconds = excluded.every_seconds, timezone = excluded.timezone,
    start_at = excluded.start_at, end_at = excluded.end_at,
    emission_limit = excluded.emission_limit,
    next_run_at = CASE WHEN s.emission_limit IS NULL OR excluded.emission_limit IS NULL
                            OR s.emitted < excluded.emission_limit
                       THEN excluded.next_run_at END,
    updated_at = now()
RETURNING name, next_run_at, (xmax = 0) AS created, pg_notify($12, '');

-- name: list_schedules
SELECT name, kind, payload, options, cron, every_seconds, timezone, start_at, end_at,
       emission_limit, emitted, next_run_at, last_run_at
FROM {schema}.schedules ORDER BY name;

-- name: get_schedule
SELECT name, kind, payload, options, cron, every_seconds, timezone, start_at, end_at,
       emission_limit, emitted, next_run_at, last_run_at
FROM {schema}.schedules WHERE name = $1;

-- name: remove_schedule
DELETE FROM {schema}.schedules WHERE name = $1 RETURNING name;

-- name: due_schedules
-- Lock due schedules of the kinds $2 this emitter knows; another emitter running at the same
-- time skips them (and one that does not know a kind leaves it to one that does).
SELECT name, kind, payload, options, cron, every_seconds, timezone, start_at, end_at,
       emission_limit, emitted, next_run_at, now() AS db_now
FROM {schema}.schedules
WHERE next_run_at IS NOT NULL AND next_run_at <= now() AND kind = ANY($2::text[])
ORDER BY next_run_at
LIMIT $1
FOR UPDATE SKIP LOCKED;

-- name: advance_schedule
UPDATE {schema}.schedules
SET next_run_at = $2, last_run_at = $3, emitted = emitted + $4, updated_at = now()
WHERE name = $1;

-- name: next_schedule_due
SELECT extract(epoch FROM min(next_run_at) - now())::float8 FROM {schema}.schedules
WHERE next_run_at IS NOT NULL;
