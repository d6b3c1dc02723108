-- Fragments: pieces of SQL that several statements share, written once. A statement names
-- one as {fragment:NAME}; the loader (sql/__init__.py) puts it in before anything else.

-- fragment: in_flight
-- A job `j` pending or running, spelled as the predicates of the partial indexes that hold such
-- jobs (0001_baseline.sql): ready or delayed (jobs_claim_idx), behind prerequisites
-- (jobs_waiting_children_idx), running (jobs_running_idx), so the planner combines them.
-- sql/filters.py's STATUS_PREDICATES spell 'pending' and 'running' the same way.
(j.status = 'running' OR (j.status = 'pending' AND (j.pending_deps = 0 OR NOT j.waits))
 OR (j.status = 'pending' AND j.pending_deps > 0 AND j.waits))

-- fragment: claimed_columns
-- What a claim hands its worker of each claimed job `c` (claim, claim_limited,
-- claim_for_worker, withdraw_idle_worker): a deferred failure (rescue_stalled_jobs.sql) apart,
-- and the last error without its traceback.
c.id, c.queue, c.kind, c.name, c.payload, c.priority, c.run_at, c.attempts,
c.max_attempts, c.deferrals, c.max_deferrals, c.backoff, c.lock_token, c.tenant,
c.metadata, c.flow_id, c.progress, c.job_key, c.created_at, c.schedule, c.stalls,
CASE WHEN c.last_error ? 'deferred' THEN c.last_error END AS deferred_failure,
c.last_error - 'traceback' AS last_error

-- fragment: inserted_columns
-- What an INSERT INTO jobs returns for added_events.
id, queue, name, job_key, tenant, pending_deps, run_at, priority, record_events

-- fragment: added_events
-- The 'added' events of the inserted jobs that record events (the statement's CTE `ins`
-- returns inserted_columns): written by the inserting statement itself
-- (sql/schema/job_events.sql says why), as one row per queue and tenant holding its jobs in id
-- order (column `added`); the rows in the order of their first job. Returns each row's queue,
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
-- The rows of a batch of jobs sent as one JSON document ($1, enqueue.py's jobs_document: an
-- array holding an array per job), each with a new id and its ordinal. One text parameter
-- costs the client a fraction of what nineteen arrays cost asyncpg to encode. The JSON
-- columns come as jsonb values; a JSON null in a nullable one is SQL NULL.
SELECT nextval('{schema}.jobs_id_seq') AS id,
       u.r->>0 AS queue, u.r->>1 AS kind, u.r->>2 AS name, u.r->15 AS payload,
       (u.r->>3)::int AS priority, (u.r->>4)::timestamptz AS run_at, (u.r->>5)::float8 AS delay,
       (u.r->>6)::int AS max_attempts, (u.r->>7)::int AS max_deferrals, u.r->16 AS backoff,
       u.r->>8 AS dedup_key, u.r->>9 AS group_key, u.r->>10 AS tenant,
       nullif(u.r->17, 'null') AS metadata, u.r->>11 AS job_key,
       nullif(u.r->18, 'null') AS retention, (u.r->>12)::bigint AS flow_id,
       (u.r->>13)::int AS pending_deps, (u.r->>14)::bool AS record_events, u.ord
    FROM jsonb_array_elements($1::text::jsonb) WITH ORDINALITY AS u(r, ord)
