-- 0005: the kinds that processes have declared (their Registry), with the defaults a job of
-- each takes, so that SQL can enqueue a job as Python does ({schema}.enqueue, sql/schema/
-- sql_enqueue.sql). Written by JobQueue.record_kinds, which every worker calls as it starts:
-- the last process to record a kind sets its defaults.
--   names_jobs / groups_jobs: the kind computes its jobs' name or group key from their input
--   (job_name, group_key in Python), which SQL cannot: an enqueue from SQL gives them.
CREATE TABLE {schema}.kinds (
    name          text        CONSTRAINT kinds_pkey PRIMARY KEY,
    queue         text        NOT NULL,
    priority      integer     NOT NULL,
    max_attempts  integer     NOT NULL,
    max_deferrals integer     NOT NULL,
    backoff       jsonb       NOT NULL,
    retention     jsonb,
    names_jobs    boolean     NOT NULL DEFAULT false,
    groups_jobs   boolean     NOT NULL DEFAULT false,
    recorded_at   timestamptz NOT NULL DEFAULT now()
);
