-- The integrity of job_logs, which names its job by id without a foreign key (migration 0007:
-- a job's move to a history partition is a delete from jobs_live, which ON DELETE CASCADE
-- would have taken the job's lines with).
--
-- A job deleted takes its lines with it, in the deleting statement (the trigger below; a
-- move fires only the UPDATE's triggers). A line appended while the job is deleted: the
-- append locks the job FOR KEY SHARE (append_log, as the foreign key's check did), so the
-- delete waits for it and its trigger, a new statement, sees the line. The lines of a dropped
-- history partition's jobs are deleted by drop_history_day, in the dropping transaction.

-- drop_deleted_jobs_logs: after a statement that deleted jobs, their log lines.
CREATE OR REPLACE FUNCTION {schema}.drop_deleted_jobs_logs() RETURNS trigger
LANGUAGE plpgsql AS $fn$
BEGIN
    DELETE FROM {schema}.job_logs l USING deleted_jobs d WHERE l.job_id = d.id;
    RETURN NULL;
END
$fn$;

-- truncate_job_logs: TRUNCATE of jobs empties job_logs too (a DELETE: a TRUNCATE that names
-- both tables has emptied job_logs already).
CREATE OR REPLACE FUNCTION {schema}.truncate_job_logs() RETURNS trigger
LANGUAGE plpgsql AS $fn$
BEGIN
    DELETE FROM {schema}.job_logs;
    RETURN NULL;
END
$fn$;

CREATE OR REPLACE TRIGGER jobs_drop_logs AFTER DELETE ON {schema}.jobs
    REFERENCING OLD TABLE AS deleted_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION {schema}.drop_deleted_jobs_logs();
CREATE OR REPLACE TRIGGER jobs_truncate_logs AFTER TRUNCATE ON {schema}.jobs
    FOR EACH STATEMENT EXECUTE FUNCTION {schema}.truncate_job_logs();
