-- Finished counts (table finished_counts, migration 0002): every statement that turns jobs
-- finished or back, or deletes finished jobs, appends its net change per (queue, status) in
-- its own transaction, so the sum of a queue's rows is its number of finished jobs in every
-- snapshot. Statement triggers on the transition tables the event log's triggers capture
-- anyway (job_events.sql); an UPDATE touching no finished row (a claim, a heartbeat) ends at
-- the first look. Inserts of finished jobs (import_jobs) count themselves. Each row names the
-- partition its jobs are in (history_day): a move to history is -n in jobs_live and +n in the
-- day, and dropping a day's partition deletes that day's rows with it (drop_history_day).

CREATE OR REPLACE FUNCTION {schema}.count_changed_finished() RETURNS trigger
LANGUAGE plpgsql AS $fn$
BEGIN
    IF NOT EXISTS (SELECT FROM after_rows n WHERE n.finished_at IS NOT NULL)
       AND NOT EXISTS (SELECT FROM before_rows o WHERE o.finished_at IS NOT NULL) THEN
        RETURN NULL;
    END IF;
    INSERT INTO {schema}.finished_counts (queue, status, history_day, n)
    SELECT c.queue, c.status, c.history_day, sum(c.n)
    FROM (SELECT n.queue, n.status, n.history_day, 1 AS n
          FROM after_rows n WHERE n.finished_at IS NOT NULL
          UNION ALL
          SELECT o.queue, o.status, o.history_day, -1
          FROM before_rows o WHERE o.finished_at IS NOT NULL) c
    GROUP BY c.queue, c.status, c.history_day
    HAVING sum(c.n) <> 0;
    RETURN NULL;
END
$fn$;

CREATE OR REPLACE FUNCTION {schema}.count_deleted_finished() RETURNS trigger
LANGUAGE plpgsql AS $fn$
BEGIN
    INSERT INTO {schema}.finished_counts (queue, status, history_day, n)
    SELECT r.queue, r.status, r.history_day, -count(*) FROM affected r
    WHERE r.finished_at IS NOT NULL
    GROUP BY r.queue, r.status, r.history_day;
    RETURN NULL;
END
$fn$;

CREATE OR REPLACE FUNCTION {schema}.truncate_finished_counts() RETURNS trigger
LANGUAGE plpgsql AS $fn$
BEGIN
    -- DELETE, not TRUNCATE: the statement may be truncating this table beside jobs
    DELETE FROM {schema}.finished_counts;
    RETURN NULL;
END
$fn$;

CREATE OR REPLACE TRIGGER jobs_count_changed AFTER UPDATE ON {schema}.jobs
    REFERENCING OLD TABLE AS before_rows NEW TABLE AS after_rows
    FOR EACH STATEMENT EXECUTE FUNCTION {schema}.count_changed_finished();
CREATE OR REPLACE TRIGGER jobs_count_deleted AFTER DELETE ON {schema}.jobs
    REFERENCING OLD TABLE AS affected
    FOR EACH STATEMENT EXECUTE FUNCTION {schema}.count_deleted_finished();
CREATE OR REPLACE TRIGGER jobs_truncate_counts AFTER TRUNCATE ON {schema}.jobs
    FOR EACH STATEMENT EXECUTE FUNCTION {schema}.truncate_finished_counts();
