-- Fragments: pieces of SQL that several statements share, written once. A statement names
-- one as {fragment:NAME}; the loader (sql/__init__.py) puts it in before anything else.

-- fragment: in_flight
-- A job `j` pending or running, spelled as the predicates of the partial indexes that hold such
-- jobs (migration 0020): ready or delayed (jobs_claim_idx), behind prerequisites
-- (jobs_waiting_children_idx), running (jobs_running_idx), so the planner combines them.
-- sql/filters.py's STATUS_PREDICATES spell 'pending' and 'running' the same way.
(j.status = 'running' OR (j.status = 'pending' AND j.pending_deps = 0)
 OR (j.status = 'pending' AND j.pending_deps > 0))

-- fragment: inserted_columns
-- What an INSERT INTO jobs returns for added_events.
id, queue, name, job_key, tenant, pending_deps, run_at, priority, record_events

-- fragment: added_events
-- The 'added' events of the inserted jobs that record events (the statement's CTE `ins`
-- returns inserted_columns): written by the inserting statement itself
-- (sql/schema/job_events.sql says why), as one row per queue and tenant holding its jobs in id
-- order (migration 0018); the rows in the order of their first job. Returns each row's queue,
-- for the statement to notify the readers (sql/schema/wake.sql).
added AS (
    INSERT INTO {schema}.job_events (queue, tenant, event, added)
    SELECT a.queue, a.tenant, 'added',
           array_agg(ROW(a.id, a.job_key, a.name, a.pending_deps, a.run_at, a.priority)
                     ::{schema}.added_job ORDER BY a.id)
    FROM ins a WHERE a.record_events
    GROUP BY a.queue, a.tenant
    ORDER BY min(a.id)
    RETURNING queue
)

-- fragment: unnested_jobs
-- The rows of an array-per-column batch of jobs ($1-$19, as sql/../enqueue.py's row_args
-- orders them), each with a new id and its ordinal.
SELECT nextval('{schema}.jobs_id_seq') AS id, u.*
    FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::int[], $6::timestamptz[],
                $7::float8[], $8::int[], $9::int[], $10::text[], $11::text[], $12::text[],
                $13::text[], $14::text[], $15::text[], $16::text[], $17::bigint[], $18::int[],
                $19::bool[])
         WITH ORDINALITY AS u(queue, kind, name, payload, priority, run_at, delay, max_attempts,
                              max_deferrals, backoff, dedup_key, group_key, tenant, metadata,
                              job_key, retention, flow_id, pending_deps, record_events, ord)
