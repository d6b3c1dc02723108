-- 0018: the 'added' events of one statement are one row per (queue, tenant): `added` holds
-- its jobs, in id order, with what their events tell (their data is built when read, as of
-- the row's `at`: sql/schema/job_events.sql). A bulk of 1,000 jobs writes one log row instead
-- of 1,000, each with its heap tuple, two index entries and a jsonb object. Readers expand
-- such a row into one event per job (events.sql, read_events), the job's position in the row
-- being the third part of its cursor; every other row has no `added` and is one event, as
-- before. The trim counts a row as its number of events.
CREATE TYPE {schema}.added_job AS (
    job_id       bigint,
    job_key      text,
    name         text,
    pending_deps int,
    run_at       timestamptz,
    priority     int
);
ALTER TABLE {schema}.job_events ADD COLUMN added {schema}.added_job[];
