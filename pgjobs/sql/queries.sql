-- Every runtime statement of the engine core, by name. {schema} is substituted once at load
-- time with a validated identifier; {job_columns} with the column list JobRow reads. Values are
-- always bind parameters. JSON goes in as text and is cast, so a caller's connection with its
-- own jsonb codec cannot double-encode it.

-- name: ping
-- A round trip that proves a connection alive (the LISTEN connection's probe).
SELECT 1;

-- name: enqueue_one
-- Insert one job, or return the job that already holds its job key (any status) or its dedup
-- key (in flight); an id of NULL means the holder of a dedup key finished between the
-- conflict and the read: try again. $1-$19 as enqueue.py's row_args, $20 the queue channel,
-- $21 this transaction's synchronous_commit, $22 whether the statement is a transaction of
-- its own (a job that could start at once may then be handed to an idle worker, and the queue
-- is notified only when a worker waits on it, its events' readers only when one follows it):
-- sql/schema/enqueue_job.sql.
SELECT id, duplicate
FROM {schema}.enqueue_job($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16,
                          $17, $18, $19, $20, $21, $22);

-- name: enqueue_many
-- Insert many jobs in one statement ($1: their JSON document, fragments.sql's unnested_jobs;
-- $2: the notification channel). Returns one row per input (by ordinal) with the id it was
-- given and whether it was written; rows not written hit a job key or an in-flight dedup key.
-- $3: synchronous_commit, and the 'added' events, as for enqueue_one; $4: whether the
-- statement is a transaction of its own (its queues are then notified only where a worker
-- or a reader waits, sql/schema/wake.sql).
WITH src AS MATERIALIZED (
    {fragment:unnested_jobs}
),
ins AS (
    INSERT INTO {schema}.jobs (id, queue, kind, name, payload, priority, run_at, max_attempts,
                               max_deferrals, backoff, dedup_key, group_key, tenant, metadata,
                               job_key, retention, flow_id, pending_deps, record_events)
    SELECT id, queue, kind, name, payload, priority,
           coalesce(run_at, now() + make_interval(secs => coalesce(delay, 0))),
           max_attempts, max_deferrals, backoff, dedup_key, group_key, tenant, metadata,
           job_key, retention, flow_id, pending_deps, record_events
    FROM src ORDER BY ord
    ON CONFLICT DO NOTHING
    RETURNING {fragment:inserted_columns}
),
{fragment:added_events},
notified AS (  -- one row: the commit setting is made once, not per job
    SELECT {schema}.wake(array_agg(DISTINCT queue), (SELECT array_agg(queue) FROM added), $2,
                         $4) AS queues,
           CASE WHEN $3::text IS NOT NULL THEN set_config('synchronous_commit', $3, true) END
    FROM src
)
SELECT src.ord, src.id, ins.id IS NOT NULL AS inserted, (SELECT queues FROM notified)
FROM src LEFT JOIN ins ON ins.id = src.id
ORDER BY src.ord;

-- name: enqueue_uniform
-- Insert many jobs that differ only by name ($1: one per job, or one for them all) and payload
-- ($2, one JSON array: the payload of each job, parsed once) and hold no job key, dedup key or
-- flow, so none can conflict: the common bulk enqueue, with every other column bound once
-- ($3-$15, enqueue_one's order without name, payload and the keys) instead of an array per
-- column. One row back: the new ids in input order. $16: the notification channel; $17:
-- synchronous_commit, and the 'added' events, as for enqueue_one; $18: whether the statement
-- is a transaction of its own, as for enqueue_many.
WITH src AS MATERIALIZED (
    SELECT nextval('{schema}.jobs_id_seq') AS id,
           CASE WHEN cardinality($1::text[]) = 1 THEN ($1::text[])[1] ELSE n.name END AS name,
           p.payload, p.ord
    FROM jsonb_array_elements($2::text::jsonb) WITH ORDINALITY AS p(payload, ord)
    LEFT JOIN unnest($1::text[]) WITH ORDINALITY AS n(name, ord)
           ON cardinality($1::text[]) > 1 AND n.ord = p.ord  -- one name: no join at all
    ORDER BY p.ord  -- nextval runs after the sort: ids in input order
),
ins AS (
    INSERT INTO {schema}.jobs (id, queue, kind, name, payload, priority, run_at, max_attempts,
                               max_deferrals, backoff, group_key, tenant, metadata, retention,
                               record_events)
    -- The values shared by every row as uncorrelated subqueries: computed once (InitPlans)
    -- instead of once per row, as a generic plan computes a cast of a parameter (a tenth less
    -- server time for a 1,000-job batch, with the commit setting made once below).
    SELECT id, $3, $4, name, payload, $5,
           (SELECT coalesce($6::timestamptz, now() + make_interval(secs => coalesce($7::float8, 0)))),
           $8, $9, (SELECT $10::text::jsonb), $11, $12, (SELECT $13::text::jsonb),
           (SELECT $14::text::jsonb), $15
    FROM src
    RETURNING {fragment:inserted_columns}
),
{fragment:added_events}
SELECT array_agg(id ORDER BY ord) AS ids,
       {schema}.wake(ARRAY[$3::text], (SELECT array_agg(queue) FROM added), $16, $18) AS notified,
       CASE WHEN $17::text IS NOT NULL THEN set_config('synchronous_commit', $17, true) END
FROM src;

-- name: claim
-- Take up to $3 due jobs of queues $1 and kinds $2 (plus up to $5 more to start later, from
-- queues without caps or rate limits), best first, for a lease of $4 seconds, honouring pause,
-- concurrency caps and rate limits (sql/schema/claim_jobs.sql). Each
-- queue is read through jobs_claim_idx with an equality on queue, so the cost does not grow
-- with the backlog; SKIP LOCKED lets concurrent claimers take disjoint rows without waiting.
-- The claim commits without waiting for the WAL flush (synchronous_commit off for this
-- transaction only): a claim lost in a server crash only means the job is handed out again,
-- which at-least-once delivery allows anyway (and a lease expiry does too). Enqueues and
-- outcomes stay durable. A job whose failure a stall deferred comes with it
-- (deferred_failure, rescue_stalled_jobs.sql). A job run before brings its last error without
-- its traceback (last_error; NULL on a first run: a fresh job's claim costs one NULL more).
SELECT {fragment:claimed_columns}
FROM (SELECT set_config('synchronous_commit', 'off', true)) AS relaxed,
     LATERAL {schema}.claim_jobs($1::text[], $2::text[], $3::int, $4::float8, $5::int) AS c;

-- name: claim_limited
-- As claim, for a claimer with limits of its own (each NULL: none): at most $6 starts per $7
-- seconds in the window its queues share among the claimers with a limit; in a grouped queue,
-- at most $8 running jobs per group and $9 starts per $10 seconds per group
-- (sql/schema/claim_jobs.sql).
SELECT {fragment:claimed_columns}
FROM (SELECT set_config('synchronous_commit', 'off', true)) AS relaxed,
     LATERAL {schema}.claim_jobs($1::text[], $2::text[], $3::int, $4::float8, $5::int,
                                 $6::int, $7::float8, NULL, $8::int, $9::int,
                                 $10::float8) AS c;

-- name: claim_for_worker
-- A worker's claim: as claim, after withdrawing the worker's registration for hand-offs ($6,
-- NULL when it has none; $7: the lock tokens of the hand-offs it has seen since it registered,
-- sql/schema/hand_offs.sql). The hand-offs it had not seen come first. $8 starts per $9
-- seconds: the worker's own rate limit (NULL: none). $10: its name, recorded on each job.
-- $11, $12 per $13 seconds: its cap and rate limit for each group of a grouped queue.
SELECT {fragment:claimed_columns}
FROM (SELECT set_config('synchronous_commit', 'off', true)) AS relaxed,
     LATERAL {schema}.claim_for_worker($6::uuid, $7::uuid[], $1::text[], $2::text[], $3::int,
                                       $4::float8, $5::int, $8::int, $9::float8, $10::text,
                                       $11::int, $12::int, $13::float8) AS c;

-- name: withdraw_idle_worker
-- End worker $1's registration for hand-offs; the hand-offs it has not seen ($2: the lock
-- tokens it has), to be given back.
SELECT {fragment:claimed_columns}
FROM (SELECT set_config('synchronous_commit', 'off', true)) AS relaxed,
     LATERAL {schema}.withdraw_idle_worker($1::uuid, $2::uuid[]) AS c;

-- name: idle_state
-- For a worker that claimed less than it asked: when to look again, and with $3 (a worker
-- id) its registration as waiting (sql/schema/wake.sql, idle_state); $8: the worker's own
-- rate limit (NULL: none).
SELECT until_due, capped, busy, registered
FROM {schema}.idle_state($1::text[], $2::text[], $3::uuid, $4::int, $5::float8, $6::float8,
                         $7::text, $8::int);

-- name: finish
-- Write outcomes fenced by lock token; resolve flow dependents; returns the ids written (an
-- id negated: a completion refused, the job having pending prerequisites). $10:
-- synchronous_commit, as for enqueue_one.
SELECT f.id
FROM (SELECT CASE WHEN $10::text IS NOT NULL
                  THEN set_config('synchronous_commit', $10, true) END) AS relaxed,
     LATERAL {schema}.finish_jobs($1::bigint[], $2::uuid[], $3::text[], $4::text[], $5::float8[],
                                  $6::text[], $7::int[], $8::int[], $9::text) AS f(id);

-- name: heartbeat
-- Extend the lease of many running jobs at once. Returns the ids still owned. Also the fenced
-- checkpoint of ctx.transaction, whose commit carries the handler's own writes: durable.
-- Rows are locked in id order, as finish_jobs locks them: the two cannot deadlock. A lock token
-- is set only while a job runs (CHECK jobs_running_has_token): matching it is the status check.
WITH owned AS (
    SELECT j.id FROM {schema}.jobs j
    JOIN unnest($1::bigint[], $2::uuid[]) AS h(id, token) ON j.id = h.id AND j.lock_token = h.token
        AND j.history_day = 'infinity'  -- running: jobs_live, pruned when planned
    ORDER BY j.id
    FOR UPDATE OF j
)
UPDATE {schema}.jobs j
SET heartbeat_at = now(), locked_until = now() + make_interval(secs => $3::float8)
FROM owned
WHERE j.id = owned.id AND j.history_day = 'infinity'
RETURNING j.id;

-- name: heartbeat_relaxed
-- The worker's periodic heartbeat: the same, committed without waiting for the WAL flush (a
-- lost extension only shortens a lease). Only ever run as its own transaction.
WITH relaxed AS (SELECT set_config('synchronous_commit', 'off', true)),
owned AS (
    SELECT j.id FROM {schema}.jobs j
    JOIN unnest($1::bigint[], $2::uuid[]) AS h(id, token) ON j.id = h.id AND j.lock_token = h.token
        AND j.history_day = 'infinity'  -- running: jobs_live, pruned when planned
    CROSS JOIN relaxed
    ORDER BY j.id
    FOR UPDATE OF j
)
UPDATE {schema}.jobs j
SET heartbeat_at = now(), locked_until = now() + make_interval(secs => $3::float8)
FROM owned
WHERE j.id = owned.id AND j.history_day = 'infinity'
RETURNING j.id;

-- name: rescue_stalled
-- Put back up to $1 running jobs whose lease ended (sql/schema/rescue_stalled_jobs.sql);
-- wakes their queues on channel $2 and resolves the dependents of those that died.
SELECT id, status, queue, job_key FROM {schema}.rescue_stalled_jobs($1::int, $2::text);

-- name: set_progress
-- Fenced progress write; also a heartbeat. Returns the id when still owned.
UPDATE {schema}.jobs
SET progress = $3::text::jsonb, heartbeat_at = now(),
    locked_until = now() + make_interval(secs => $4::float8)
WHERE id = $1 AND lock_token = $2 AND status = 'running'
RETURNING id;

-- name: set_retention_fenced
-- Fenced: replace the retention rules $3 names (keys "completed", "dead") of running job $1,
-- keeping the rule of a status $3 does not name. Returns the id when still owned.
UPDATE {schema}.jobs
SET retention = coalesce(retention, '{}'::jsonb) || $3::text::jsonb
WHERE id = $1 AND lock_token = $2 AND status = 'running'
RETURNING id;

-- name: get_job
-- One job, only if it belongs to tenant $2 (NULL: only a job without tenant), unless $3.
SELECT {job_columns} FROM {schema}.jobs
WHERE id = $1 AND ($3::bool OR tenant IS NOT DISTINCT FROM $2::text);

-- name: jobs_by_job_key
-- The jobs named by job key $1 in any queue, of tenant $2 (NULL: without tenant) unless $3,
-- up to $4. The queues holding keyed jobs are walked one by one through jobs_job_key_idx (a
-- loose index scan: a recursive step per queue, not a scan of the table), then each is
-- probed for the key through the same index.
WITH RECURSIVE keyed_queues AS (
    (SELECT queue FROM {schema}.jobs WHERE job_key IS NOT NULL ORDER BY queue LIMIT 1)
    UNION ALL
    SELECT (SELECT j.queue FROM {schema}.jobs j
            WHERE j.job_key IS NOT NULL AND j.queue > k.queue ORDER BY j.queue LIMIT 1)
    FROM keyed_queues k WHERE k.queue IS NOT NULL
)
SELECT {job_columns} FROM {schema}.jobs
WHERE queue IN (SELECT queue FROM keyed_queues WHERE queue IS NOT NULL) AND job_key = $1
  AND ($3::bool OR tenant IS NOT DISTINCT FROM $2::text)
ORDER BY id
LIMIT $4;

-- name: get_by_dedup_key
-- The in-flight job holding a dedup key in a queue, for that tenant.
SELECT {job_columns} FROM {schema}.jobs
WHERE queue = $1 AND dedup_key = $2 AND coalesce(tenant, '') = coalesce($3::text, '')
  AND status IN ('pending', 'running');

-- name: record_kinds
-- Record kinds and their defaults (table kinds; $1: a JSON array of objects with its
-- columns), replacing what an earlier process recorded of them.
INSERT INTO {schema}.kinds AS k (name, queue, priority, max_attempts, max_deferrals, backoff,
                                 retention, names_jobs, groups_jobs)
SELECT r.name, r.queue, r.priority, r.max_attempts, r.max_deferrals, r.backoff, r.retention,
       r.names_jobs, r.groups_jobs
FROM jsonb_to_recordset($1::text::jsonb) AS r(name text, queue text, priority int,
                                              max_attempts int, max_deferrals int,
                                              backoff jsonb, retention jsonb, names_jobs bool,
                                              groups_jobs bool)
ON CONFLICT (name) DO UPDATE
SET queue = excluded.queue, priority = excluded.priority,
    max_attempts = excluded.max_attempts, max_deferrals = excluded.max_deferrals,
    backoff = excluded.backoff, retention = excluded.retention,
    names_jobs = excluded.names_jobs, groups_jobs = excluded.groups_jobs, recorded_at = now()
WHERE (k.queue, k.priority, k.max_attempts, k.max_deferrals, k.backoff, k.retention,
       k.names_jobs, k.groups_jobs)
      IS DISTINCT FROM (excluded.queue, excluded.priority, excluded.max_attempts,
                        excluded.max_deferrals, excluded.backoff, excluded.retention,
                        excluded.names_jobs, excluded.groups_jobs);
