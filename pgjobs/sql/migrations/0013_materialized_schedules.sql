-- 0013: schedules whose next run is a job (BullMQ's job schedulers). A materialized schedule
-- keeps exactly one pending iteration, a delayed job created when the schedule is upserted and
-- whenever a worker starts the current one; the emitter loop leaves such schedules alone.
ALTER TABLE {schema}.schedules
    ADD COLUMN materialized   boolean NOT NULL DEFAULT false,
    ADD COLUMN pending_job_id bigint;          -- the iteration waiting to run (soft reference)
ALTER TABLE {schema}.jobs ADD COLUMN schedule text;  -- the materialized schedule it iterates
