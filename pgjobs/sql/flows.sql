-- Flows: a DAG of jobs submitted together. A flow whose nodes hold no key is written by
-- insert_keyless_flow alone; otherwise its nodes are inserted by enqueue_many (with flow_id and
-- pending_deps set) after insert_flow, then insert_edges. Then the re-drives.

-- name: insert_flow
-- $4: synchronous_commit of the flow's transaction, as for enqueue_one.
INSERT INTO {schema}.flows (name, metadata, tenant) VALUES ($1, $2::text::jsonb, $3)
RETURNING id, CASE WHEN $4::text IS NOT NULL THEN set_config('synchronous_commit', $4, true) END;

-- name: insert_keyless_flow
-- A whole flow in one statement, for nodes with no job key and no dedup key (nothing can
-- conflict, so every row is written and no transaction is needed): the flow row ($4 name, $5
-- metadata, $6 tenant), the nodes ($1, their JSON document as for enqueue_many; their flow_id
-- is the new row's), and the edges between them by node ordinal ($7 prerequisite, $8
-- dependent, $9 policy). $2: the notification channel; $3: synchronous_commit, as for
-- enqueue_one; $10: whether the statement is a transaction of its own, as for enqueue_many.
WITH flow AS (
    INSERT INTO {schema}.flows (name, metadata, tenant) VALUES ($4, $5::text::jsonb, $6)
    RETURNING id, CASE WHEN $3::text IS NOT NULL
                       THEN set_config('synchronous_commit', $3, true) END
),
src AS MATERIALIZED (
    {fragment:unnested_jobs}
),
ins AS (
    INSERT INTO {schema}.jobs (id, queue, kind, name, payload, priority, run_at, max_attempts,
                               max_deferrals, backoff, group_key, tenant, metadata, retention,
                               flow_id, pending_deps, record_events)
    SELECT id, queue, kind, name, payload, priority,
           coalesce(run_at, now() + make_interval(secs => coalesce(delay, 0))),
           max_attempts, max_deferrals, backoff, group_key, tenant, metadata, retention,
           (SELECT f.id FROM flow f), pending_deps, record_events
    FROM src ORDER BY ord
    RETURNING {fragment:inserted_columns}
),
{fragment:added_events},
edges AS (
    INSERT INTO {schema}.job_edges (prerequisite_id, dependent_id, policy)
    SELECT p.id, d.id, e.policy
    FROM unnest($7::bigint[], $8::bigint[], $9::text[]) AS e(prerequisite, dependent, policy)
    JOIN src p ON p.ord = e.prerequisite
    JOIN src d ON d.ord = e.dependent
),
notified AS (
    SELECT {schema}.wake(array_agg(DISTINCT queue), (SELECT array_agg(queue) FROM added), $2,
                         $10) AS queues
    FROM src
)
SELECT (SELECT f.id FROM flow f) AS flow_id, src.id, (SELECT queues FROM notified)
FROM src ORDER BY src.ord;

-- name: insert_edges
INSERT INTO {schema}.job_edges (prerequisite_id, dependent_id, policy)
SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::text[]);

-- name: uncount_edges
-- The jobs $1, just written by this transaction counting every edge of their flow, stop
-- counting one edge per entry (those from reused existing jobs, which attach_prerequisites
-- counts as it writes them: Flows.submit with reuse).
UPDATE {schema}.jobs d SET pending_deps = d.pending_deps - n.edges
FROM (SELECT u.id, count(*)::int AS edges FROM unnest($1::bigint[]) AS u(id) GROUP BY u.id) n
WHERE d.id = n.id;

-- name: lock_flow
-- Every job of flow $1 (tenant-scoped), locked in id order: nothing can claim or finish them
-- until the re-drive commits.
SELECT id, status FROM {schema}.jobs
WHERE flow_id = $1 AND ($3::bool OR tenant IS NOT DISTINCT FROM $2::text)
ORDER BY id
FOR UPDATE;

-- name: requeue_flow
-- In place: dead and cancelled nodes back to pending with fresh budgets; every edge reopened
-- unless its prerequisite completed; pending_deps recomputed; completed nodes kept as they are.
WITH redriven AS (
    UPDATE {schema}.jobs j
    SET status = 'pending', attempts = 0, deferrals = 0, stalls = 0, run_at = now(),
        finished_at = NULL, lock_token = NULL, locked_until = NULL,
        history_day = 'infinity',  -- back to jobs_live (migration 0007)
        last_error = j.last_error - 'deferred'  -- a re-drive runs it (rescue_stalled_jobs.sql)
    WHERE j.flow_id = $1 AND j.status IN ('dead', 'cancelled')
    RETURNING j.id, j.queue
),
edges AS (
    UPDATE {schema}.job_edges e
    SET state = CASE WHEN p.status = 'completed' THEN 'satisfied' ELSE 'open' END,
        failure = CASE WHEN p.status = 'completed' THEN e.failure END
    FROM {schema}.jobs p, {schema}.jobs d
    WHERE p.id = e.prerequisite_id AND d.id = e.dependent_id AND d.flow_id = $1
      AND (p.id IN (SELECT id FROM redriven) OR d.id IN (SELECT id FROM redriven))
)
SELECT id, queue FROM redriven;

-- name: recount_flow_deps
-- Recount after lock_flow: every node was locked by an earlier statement, so this statement's
-- snapshot sees every edge change committed before the lock, and no other can commit before
-- this transaction ends (sql/schema/resolve_dependents.sql explains why recounts need this).
UPDATE {schema}.jobs d
SET pending_deps = (SELECT count(*) FROM {schema}.job_edges e
                    WHERE e.dependent_id = d.id AND e.state IN ('open', 'blocked'))
WHERE d.flow_id = $1 AND d.status = 'pending';

-- name: rerun_flow
-- Clone flow $1 under new flow $2: every node pending again with its priority and budgets,
-- every edge with its policy. Job keys are not copied (they name the original jobs).
WITH src AS MATERIALIZED (
    SELECT j.*, nextval('{schema}.jobs_id_seq') AS new_id
    FROM {schema}.jobs j WHERE j.flow_id = $1 ORDER BY j.id
),
ins AS (
    INSERT INTO {schema}.jobs (id, queue, kind, name, payload, priority, max_attempts,
                               max_deferrals, backoff, dedup_key, group_key, tenant, metadata,
                               retention, flow_id, pending_deps, record_events)
    SELECT s.new_id, s.queue, s.kind, s.name, s.payload, s.priority, s.max_attempts,
           s.max_deferrals, s.backoff, s.dedup_key, s.group_key, s.tenant, s.metadata,
           s.retention, $2,
           (SELECT count(*) FROM {schema}.job_edges e JOIN src p ON p.id = e.prerequisite_id
            WHERE e.dependent_id = s.id),  -- the edges cloned below
           s.record_events
    FROM src s ORDER BY s.id
    RETURNING {fragment:inserted_columns}
),
{fragment:added_events},
edges AS (
    INSERT INTO {schema}.job_edges (prerequisite_id, dependent_id, policy)
    SELECT p.new_id, d.new_id, e.policy
    FROM {schema}.job_edges e JOIN src p ON p.id = e.prerequisite_id JOIN src d ON d.id = e.dependent_id
),
notified AS (  -- in a transaction of several statements: every reader (sql/schema/wake.sql)
    SELECT {schema}.wake('{}', array_agg(queue), NULL, false) AS readers FROM added
)
SELECT src.id AS old_id, src.new_id, src.queue, (SELECT readers FROM notified) FROM src;

-- name: clone_flow_row
-- The flow row of a rerun: same name and metadata when $1 had a row.
INSERT INTO {schema}.flows (name, metadata, tenant)
SELECT f.name, f.metadata, f.tenant FROM (SELECT 1) one
LEFT JOIN {schema}.flows f ON f.id = $1
RETURNING id;

-- name: flow_exists
SELECT EXISTS (SELECT FROM {schema}.jobs WHERE flow_id = $1 AND ($3::bool OR tenant IS NOT DISTINCT FROM $2::text));

-- name: lock_dependent
-- The job that will receive a new prerequisite, locked, if it exists for the tenant; whether
-- its prerequisites hold it back now (a pending job with counted ones that it waits for).
SELECT id, status, flow_id, tenant, waits,
       status = 'pending' AND pending_deps > 0 AND waits AS held FROM {schema}.jobs
WHERE id = $1 AND ($3::bool OR tenant IS NOT DISTINCT FROM $2::text)
FOR UPDATE;

-- name: set_waits
-- Whether locked pending job $1 waits for its counted prerequisites ($2), before an attach:
-- false keeps it claimable although it gains some (Flows.add_prerequisite's wait=False).
UPDATE {schema}.jobs SET waits = $2 WHERE id = $1 AND status = 'pending';

-- name: adopt_into_flow
-- Give job $1 (tenant $2) a flow of its own, so that prerequisites added later share it.
WITH f AS (INSERT INTO {schema}.flows (tenant) VALUES ($2) RETURNING id)
UPDATE {schema}.jobs SET flow_id = (SELECT id FROM f) WHERE id = $1 RETURNING flow_id;

-- name: depends_on
-- Whether job $1 already depends, directly or transitively, on job $2 (a new edge $1 -> $2
-- would close a cycle).
WITH RECURSIVE up(id) AS (
    SELECT prerequisite_id FROM {schema}.job_edges WHERE dependent_id = $1
    UNION
    SELECT e.prerequisite_id FROM {schema}.job_edges e JOIN up ON e.dependent_id = up.id
)
SELECT EXISTS (SELECT FROM up WHERE id = $2);

-- name: attach_prerequisites
-- Edges $1[i] -> $2[i] with policies $3, states $4 and failures $5 (sql/schema/
-- attach_prerequisites.sql); returns how many were added. $6: channel.
SELECT {schema}.attach_prerequisites($1::bigint[], $2::bigint[], $3::text[], $4::text[],
                                     $5::text[]::jsonb[], $6::text);

-- name: open_prerequisites
-- Job $1's prerequisites still open (or blocked), if the caller still owns it (token $2).
SELECT pending_deps FROM {schema}.jobs WHERE id = $1 AND lock_token = $2 AND status = 'running';

-- name: detach_prerequisite
-- Remove edge $1 -> $2 (sql/schema/attach_prerequisites.sql); $3: channel. Only when neither
-- job belongs to a tenant other than $4 (any tenant with $5): false, as for no edge, otherwise.
-- (A job's tenant never changes, so the check cannot go stale before the removal.)
SELECT CASE WHEN $5::bool OR NOT EXISTS (SELECT FROM {schema}.jobs j
                                         WHERE j.id IN ($1::bigint, $2::bigint)
                                           AND j.tenant IS DISTINCT FROM $4::text)
            THEN {schema}.detach_prerequisite($1::bigint, $2::bigint, $3::text)
            ELSE false END;

-- name: dependents_of
-- The jobs that wait for job $1 (tenant-scoped by $2/$3), with the state of each edge and
-- the dependent's queue and job key (NULL when the dependent is gone).
SELECT e.dependent_id AS id, e.policy, e.state, d.queue, d.job_key FROM {schema}.job_edges e
JOIN {schema}.jobs j ON j.id = e.prerequisite_id
LEFT JOIN {schema}.jobs d ON d.id = e.dependent_id
WHERE e.prerequisite_id = $1 AND ($3::bool OR j.tenant IS NOT DISTINCT FROM $2::text)
ORDER BY e.dependent_id;

-- name: remove_job_tree
-- Delete job $1 (tenant-scoped by $2/$3) and every job it waits for, transitively; NULL when
-- one of them is held by a worker (nothing deleted); $4: channel. See remove_job_tree.sql.
SELECT {schema}.remove_job_tree($1::bigint, $2::text, $3::bool, $4::text);

-- name: serialise_attaches
-- For add_prerequisite's sole_dependent: serialise the attaches of an existing prerequisite
-- $1 (an advisory lock held to commit); the statement after it reads with a fresh snapshot.
SELECT pg_advisory_xact_lock(hashtextextended('pgjobs:{schema}:sole-dependent:' || $1::bigint, 0));

-- name: other_dependent
-- An existing job other than $2 that already waits for job $1 (none: no row).
SELECT e.dependent_id FROM {schema}.job_edges e JOIN {schema}.jobs d ON d.id = e.dependent_id
WHERE e.prerequisite_id = $1 AND e.dependent_id <> $2
ORDER BY e.dependent_id LIMIT 1;
