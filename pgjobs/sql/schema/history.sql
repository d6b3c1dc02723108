-- History partitions (migration 0007): jobs is partitioned by history_day. jobs_live
-- ('infinity') holds every job in flight and every job finished recently; GC moves completed
-- jobs to the partition of the (UTC) day they finished, jobs_h<yyyymmdd>, and drops a day's
-- partition whole once the day is past the global retention of completed jobs.
--
-- A move is an UPDATE of history_day through jobs, which PostgreSQL performs as a delete from
-- jobs_live and an insert into the day's partition in the same transaction: a reader of jobs
-- sees the job before the move or after it, in exactly one partition, never both or neither.
-- A statement that waits on a row while it moves fails with a serialization error (SQLSTATE
-- 40001) rather than lose the change; the engine runs its statements and operations again
-- (executor.py), and the retry finds the job in its day. Moves take only jobs finished longer
-- ago than GC's history_after, a batch per transaction, skipping locked rows, so the window is
-- small.
--
-- Jobs that stay in jobs_live: those in flight; dead and cancelled ones (kept longer than
-- completed ones, and few); those with a job key (its unique index is jobs_live's, and a key
-- names its job over every status); those with a retention rule of their own for completed
-- jobs (keep_completed, BullMQ's removeOnComplete), which deletes them; and completed
-- prerequisites that a pending or running dependent still reads. These leave by GC's deletes,
-- as before; a history partition holds only jobs that leave with their day.

-- create_history_partition: the partition of day p_day, unless it exists: a table like
-- jobs_live (columns, constraints, indexes), attached for [p_day, p_day + 1). ATTACH takes
-- SHARE UPDATE EXCLUSIVE on jobs, which enqueues, claims and outcomes do not wait for.
-- Returns whether it created it.
CREATE OR REPLACE FUNCTION {schema}.create_history_partition(p_day date) RETURNS boolean
LANGUAGE plpgsql AS $fn$
DECLARE
    part text := 'jobs_h' || to_char(p_day, 'YYYYMMDD');
BEGIN
    IF p_day IS NULL OR NOT isfinite(p_day) THEN
        RAISE EXCEPTION 'a history partition needs a finite day, not %', p_day;
    END IF;
    IF to_regclass(format('{schema}.%I', part)) IS NOT NULL THEN
        RETURN false;
    END IF;
    EXECUTE format('CREATE TABLE {schema}.%I (LIKE {schema}.jobs_live INCLUDING ALL)', part);
    EXECUTE format('ALTER TABLE {schema}.jobs ATTACH PARTITION {schema}.%I'
                   ' FOR VALUES FROM (%L) TO (%L)', part, p_day, p_day + 1);
    RETURN true;
END
$fn$;

-- history_days: the days that have a history partition, oldest first.
CREATE OR REPLACE FUNCTION {schema}.history_days() RETURNS SETOF date
LANGUAGE sql STABLE AS $fn$
    SELECT to_date(substr(c.relname, 7), 'YYYYMMDD') AS day
    FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
    WHERE i.inhparent = '{schema}.jobs'::regclass AND c.relname LIKE 'jobs\_h%'
    ORDER BY 1
$fn$;

-- drop_history_day: drop the partition of day p_day, with everything that names its jobs, in
-- one transaction; returns how many jobs it held (NULL: no such partition).
--   * It locks the partition EXCLUSIVE first: reads go on, but no statement changes or locks
--     a job of the day until the drop commits (an edge to a job, a log line and a move all lock
--     the job's row first), so the work below sees every such row, and none arrives after it.
--   * A job of the day that a pending or running dependent reads goes back to jobs_live
--     (GC then deletes it when it may, as any job there).
--   * The satisfied edges of its completed jobs keep their copy (removed_prerequisite), as
--     when a prerequisite is deleted (job_edges_integrity.sql); its other edges and its jobs'
--     log lines are deleted.
--   * The day's finished counts go with it (finished_counts rows of that history_day).
--   * Last, ACCESS EXCLUSIVE on jobs, which DETACH needs, for the DETACH and the DROP only.
-- Every lock waits at most the caller's lock_timeout. A statement that changed jobs and then
-- waits for a row of the day, while the drop waits for jobs, is a deadlock PostgreSQL breaks
-- by failing one of the two: the drop is left to GC's next run, a statement is run again.
CREATE OR REPLACE FUNCTION {schema}.drop_history_day(p_day date) RETURNS bigint
LANGUAGE plpgsql AS $fn$
DECLARE
    part text := 'jobs_h' || to_char(p_day, 'YYYYMMDD');
    held bigint;
BEGIN
    IF to_regclass(format('{schema}.%I', part)) IS NULL THEN
        RETURN NULL;
    END IF;
    EXECUTE format('LOCK TABLE {schema}.%I IN EXCLUSIVE MODE', part);
    UPDATE {schema}.jobs j SET history_day = 'infinity'
    WHERE j.history_day = p_day
      AND j.id IN (SELECT e.prerequisite_id FROM {schema}.job_edges e
                   JOIN {schema}.jobs_live d ON d.id = e.dependent_id
                   WHERE d.status IN ('pending', 'running'));
    EXECUTE format(
        'UPDATE {schema}.job_edges e
         SET removed_prerequisite = jsonb_build_object(''kind'', d.kind, ''name'', d.name,
                                                       ''queue'', d.queue,
                                                       ''job_key'', d.job_key,
                                                       ''output'', d.output)
         FROM {schema}.%I d
         WHERE e.prerequisite_id = d.id AND d.status = ''completed''
           AND e.state = ''satisfied'' AND e.removed_prerequisite IS NULL', part);
    EXECUTE format(
        'DELETE FROM {schema}.job_edges e
         WHERE (e.removed_prerequisite IS NULL
                AND EXISTS (SELECT FROM {schema}.%1$I d WHERE d.id = e.prerequisite_id))
            OR EXISTS (SELECT FROM {schema}.%1$I d WHERE d.id = e.dependent_id)', part);
    EXECUTE format(
        'DELETE FROM {schema}.job_logs l
         WHERE EXISTS (SELECT FROM {schema}.%I d WHERE d.id = l.job_id)', part);
    SELECT coalesce(sum(c.n), 0) INTO held
    FROM {schema}.finished_counts c WHERE c.history_day = p_day;
    DELETE FROM {schema}.finished_counts c WHERE c.history_day = p_day;
    LOCK TABLE {schema}.jobs IN ACCESS EXCLUSIVE MODE;
    EXECUTE format('ALTER TABLE {schema}.jobs DETACH PARTITION {schema}.%I', part);
    EXECUTE format('DROP TABLE {schema}.%I', part);
    RETURN held;
END
$fn$;
