-- 0017: pausing a schedule (the dashboard's and JobQueue.pause_schedule). A paused schedule
-- (paused_at set) emits nothing; a materialized one has no pending run while paused.
ALTER TABLE {schema}.schedules ADD COLUMN paused_at timestamptz;
