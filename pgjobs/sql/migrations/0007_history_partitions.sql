-- 0007: jobs becomes a table partitioned by history_day, so that history is pruned by
-- dropping a day's partition rather than deleting its rows one by one.
--
--   history_day: 'infinity' for a job in jobs_live, the partition that holds every job in
--                flight and every job finished recently (or with a job key); the day of a
--                history partition (jobs_h<yyyymmdd>, [day, day + 1)) for a finished job moved
--                there by move_to_history (maintenance.sql), which GC later drops whole.
--
-- The table that was jobs becomes the partition jobs_live, with its rows, indexes and
-- constraints: the upgrade rewrites no row. Its identity becomes the sequence jobs_id_seq
-- (a partitioned table has no identity column on this PostgreSQL), continued from where the
-- identity stood, so no id is ever given twice. Its triggers move to the partitioned table
-- (schema/*.sql creates them there). job_logs loses its foreign key (a move is a delete from
-- jobs_live, which would cascade to the job's lines): job_logs_integrity.sql deletes a deleted
-- job's lines instead, and GC the lines of a dropped partition's jobs.
--
-- The upgrade holds an ACCESS EXCLUSIVE lock on jobs while ATTACH checks jobs_live's bound
-- (one scan of the table): seconds on tens of millions of rows.

DO $do$
DECLARE
    next_id bigint;
BEGIN
    SELECT CASE WHEN is_called THEN last_value + 1 ELSE last_value END INTO next_id
    FROM {schema}.jobs_id_seq;
    ALTER TABLE {schema}.jobs ALTER COLUMN id DROP IDENTITY;
    CREATE SEQUENCE {schema}.jobs_id_seq AS bigint;
    PERFORM setval('{schema}.jobs_id_seq', next_id, false);
END
$do$;

ALTER TABLE {schema}.job_logs DROP CONSTRAINT job_logs_job_id_fkey;
DROP TRIGGER IF EXISTS jobs_count_changed ON {schema}.jobs;
DROP TRIGGER IF EXISTS jobs_count_deleted ON {schema}.jobs;
DROP TRIGGER IF EXISTS jobs_truncate_counts ON {schema}.jobs;
DROP TRIGGER IF EXISTS jobs_note_group ON {schema}.jobs;
DROP TRIGGER IF EXISTS jobs_drop_edges ON {schema}.jobs;
DROP TRIGGER IF EXISTS jobs_truncate_edges ON {schema}.jobs;
DROP TRIGGER IF EXISTS jobs_events_update ON {schema}.jobs;
DROP TRIGGER IF EXISTS jobs_events_delete ON {schema}.jobs;

ALTER TABLE {schema}.jobs
    ADD COLUMN history_day date NOT NULL DEFAULT 'infinity',
    -- A job in flight is in jobs_live: the statements that turn a finished job back into a
    -- pending one set history_day to 'infinity', which moves it there.
    ADD CONSTRAINT jobs_in_flight_is_live CHECK (finished_at IS NOT NULL OR history_day = 'infinity');
ALTER TABLE {schema}.jobs RENAME TO jobs_live;
CREATE TABLE {schema}.jobs (LIKE {schema}.jobs_live INCLUDING DEFAULTS INCLUDING CONSTRAINTS)
    PARTITION BY RANGE (history_day);
ALTER TABLE {schema}.jobs ALTER COLUMN id SET DEFAULT nextval('{schema}.jobs_id_seq');
ALTER SEQUENCE {schema}.jobs_id_seq OWNED BY {schema}.jobs.id;
ALTER TABLE {schema}.jobs ATTACH PARTITION {schema}.jobs_live
    FOR VALUES FROM ('infinity') TO (MAXVALUE);

-- Finished counts by the partition their jobs are in, so that dropping a day's partition
-- drops that day's counts with it, exactly.
ALTER TABLE {schema}.finished_counts ADD COLUMN history_day date NOT NULL DEFAULT 'infinity';
