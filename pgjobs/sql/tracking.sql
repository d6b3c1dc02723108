-- The tracking (dashboard) API: one query per call, no N+1. {where} is a JobFilter rendered by
-- sql/filters.py. Sub-states come from sub_state() (sql/schema/sub_state.sql).

-- name: substate_counts
-- Counts per sub-state of the jobs matching {where}, in two halves that each read their own
-- partial index: in flight (few rows) and finished (an index-only count where the filter allows).
SELECT {schema}.sub_state(j.status, j.pending_deps, j.waits, j.run_at, j.attempts) AS sub_state, count(*) AS n
FROM {schema}.jobs j
WHERE {fragment:in_flight} AND {where}
GROUP BY 1
UNION ALL
SELECT CASE j.status WHEN 'dead' THEN 'failed' ELSE j.status END, count(*)
FROM {schema}.jobs j
WHERE j.finished_at IS NOT NULL AND {where}
GROUP BY j.status;

-- name: list_jobs
-- A page ($1 offset, $2 limit) of jobs matching {where}, in the order {order} (one of
-- tracking.ORDERS: insertion, claim order, due time, start or finish time, either way).
SELECT {job_columns}
FROM {schema}.jobs j
WHERE {where}
ORDER BY {order}
OFFSET $1 LIMIT $2;

-- name: queue_counts
-- Counts per sub-state of queue $1: in flight from the partial indexes, finished from the
-- finished counts (time proportional to the jobs in flight, not to the history).
SELECT {schema}.sub_state(j.status, j.pending_deps, j.waits, j.run_at, j.attempts) AS sub_state,
       count(*) AS n
FROM {schema}.jobs j
WHERE {fragment:in_flight} AND j.queue = $1
GROUP BY 1
UNION ALL
SELECT CASE c.status WHEN 'dead' THEN 'failed' ELSE c.status END, sum(c.n)::bigint
FROM {schema}.finished_counts c WHERE c.queue = $1
GROUP BY c.status;

-- name: all_counts
-- Counts per sub-state of every queue together, as queue_counts counts one queue.
SELECT {schema}.sub_state(j.status, j.pending_deps, j.waits, j.run_at, j.attempts) AS sub_state,
       count(*) AS n
FROM {schema}.jobs j
WHERE {fragment:in_flight}
GROUP BY 1
UNION ALL
SELECT CASE c.status WHEN 'dead' THEN 'failed' ELSE c.status END, sum(c.n)::bigint
FROM {schema}.finished_counts c
GROUP BY c.status;

-- name: fold_finished_counts
-- Fold the finished counts into one row per queue, status and partition (rows summing to 0
-- go), unless another session is folding them now; returns how many rows were folded.
-- Concurrent changes append rows this statement's snapshot does not see, which it leaves as
-- they are.
WITH folding AS (
    SELECT pg_try_advisory_xact_lock(hashtextextended('{schema}.finished_counts', 0)) AS ok
),
gone AS (
    DELETE FROM {schema}.finished_counts c USING folding f WHERE f.ok
    RETURNING c.queue, c.status, c.history_day, c.n
),
folded AS (
    INSERT INTO {schema}.finished_counts (queue, status, history_day, n)
    SELECT g.queue, g.status, g.history_day, sum(g.n) FROM gone g
    GROUP BY g.queue, g.status, g.history_day HAVING sum(g.n) <> 0
)
SELECT count(*) FROM gone;

-- name: queue_stats
-- Per queue: counts per sub-state, and its settings, label and dialect.
WITH counts AS (
    SELECT j.queue, {schema}.sub_state(j.status, j.pending_deps, j.waits, j.run_at, j.attempts) AS sub_state,
           count(*) AS n
    FROM {schema}.jobs j WHERE {fragment:in_flight}
    GROUP BY 1, 2
    UNION ALL  -- finished jobs: counted as they finished (sql/schema/finished_counts.sql)
    SELECT c.queue, CASE c.status WHEN 'dead' THEN 'failed' ELSE c.status END, sum(c.n)::bigint
    FROM {schema}.finished_counts c
    GROUP BY c.queue, c.status HAVING sum(c.n) <> 0
),
queues AS (SELECT DISTINCT queue FROM counts UNION SELECT queue FROM {schema}.queue_settings)
SELECT q.queue, coalesce(jsonb_object_agg(c.sub_state, c.n) FILTER (WHERE c.sub_state IS NOT NULL), '{}') AS counts,
       coalesce(qs.paused, false) AS paused, qs.concurrency, qs.group_concurrency, qs.rate_limit,
       qs.rate_period, qs.label, qs.dialect
FROM queues q
LEFT JOIN counts c ON c.queue = q.queue
LEFT JOIN {schema}.queue_settings qs ON qs.queue = q.queue
GROUP BY q.queue, qs.queue
ORDER BY q.queue;

-- name: list_flows
-- A page of flow summaries, newest first. {where} filters the flow (alias f: the summary row,
-- alias j for EXISTS on its jobs). Flows are every flow row plus flow ids without a row.
WITH flow_ids AS (
    SELECT fl.id AS flow_id, fl.name, fl.tenant FROM {schema}.flows fl
    UNION ALL
    SELECT DISTINCT o.flow_id, NULL::text, o.tenant FROM {schema}.jobs o
    WHERE o.flow_id IS NOT NULL AND NOT EXISTS (SELECT FROM {schema}.flows x WHERE x.id = o.flow_id)
),
f AS (
    SELECT i.flow_id, i.name, i.tenant, s.*
    FROM flow_ids i CROSS JOIN LATERAL {schema}.flow_stats(i.flow_id) s
    WHERE s.total > 0
)
SELECT f.* FROM f
WHERE {where}
ORDER BY f.created_at DESC, f.flow_id DESC
OFFSET $1 LIMIT $2;

-- name: flow_summary
SELECT i.flow_id, fl.name, s.*
FROM (SELECT $1::bigint AS flow_id) i
LEFT JOIN {schema}.flows fl ON fl.id = i.flow_id
CROSS JOIN LATERAL {schema}.flow_stats(i.flow_id) s
WHERE s.total > 0
  AND ($3::bool OR NOT EXISTS (SELECT FROM {schema}.jobs j
                               WHERE j.flow_id = i.flow_id AND j.tenant IS DISTINCT FROM $2::text));

-- name: flow_graph_nodes
-- Light nodes: no payload, no output, so a 1,000-node flow stays small.
SELECT j.id, j.name, j.kind, j.queue, j.status, j.priority, j.attempts, j.max_attempts,
       j.pending_deps, j.created_at, j.started_at, j.finished_at,
       {schema}.sub_state(j.status, j.pending_deps, j.waits, j.run_at, j.attempts) AS sub_state
FROM {schema}.jobs j WHERE j.flow_id = $1 ORDER BY j.id;

-- name: flow_graph_edges
-- (an edge whose prerequisite was deleted, job_edges_integrity.sql, is not in the graph)
SELECT e.prerequisite_id, e.dependent_id, e.policy, e.state
FROM {schema}.job_edges e JOIN {schema}.jobs d ON d.id = e.dependent_id
WHERE d.flow_id = $1 AND e.removed_prerequisite IS NULL
ORDER BY e.prerequisite_id, e.dependent_id;

-- name: queue_metrics
-- Finished counts of queue $1 per $2 bucket ('minute' | 'hour' | 'day', UTC) over [$3, $4),
-- zero-filled: the rollup for rows finished before the sweep's watermark, a live count for the
-- rows after it. Each row is on exactly one side of the watermark: no double count, no hole.
WITH watermark AS (
    SELECT coalesce((SELECT swept_until FROM {schema}.metrics_watermark), '-infinity'::timestamptz) AS t
),
buckets AS (
    SELECT generate_series(date_trunc($2, $3::timestamptz, 'UTC'),
                           $4::timestamptz - interval '1 microsecond',
                           ('1 ' || $2)::interval) AS bucket
),
rolled AS (
    SELECT date_trunc($2, m.bucket, 'UTC') AS bucket, sum(m.completed) AS completed,
           sum(m.dead) AS dead, sum(m.cancelled) AS cancelled
    FROM {schema}.metrics_rollup m
    WHERE m.queue = $1 AND m.bucket >= date_trunc($2, $3::timestamptz, 'UTC') AND m.bucket < $4
    GROUP BY 1
),
live AS (
    SELECT date_trunc($2, j.finished_at, 'UTC') AS bucket,
           count(*) FILTER (WHERE j.status = 'completed') AS completed,
           count(*) FILTER (WHERE j.status = 'dead') AS dead,
           count(*) FILTER (WHERE j.status = 'cancelled') AS cancelled
    FROM {schema}.jobs j
    WHERE j.queue = $1 AND j.finished_at IS NOT NULL
      AND j.finished_at >= greatest((SELECT t FROM watermark), date_trunc($2, $3::timestamptz, 'UTC'))
      AND j.finished_at < $4
    GROUP BY 1
)
SELECT b.bucket,
       (coalesce(r.completed, 0) + coalesce(l.completed, 0))::bigint AS completed,
       (coalesce(r.dead, 0) + coalesce(l.dead, 0))::bigint AS dead,
       (coalesce(r.cancelled, 0) + coalesce(l.cancelled, 0))::bigint AS cancelled
FROM buckets b
LEFT JOIN rolled r ON r.bucket = b.bucket
LEFT JOIN live l ON l.bucket = b.bucket
ORDER BY b.bucket;

-- name: replica_lag
-- How far this server's data is behind its primary, in seconds: NULL on a primary; 0 on a
-- standby that has replayed all it received (an idle primary sends nothing, and the time of
-- the last replayed commit would grow for ever); otherwise the age of that commit.
SELECT CASE WHEN NOT pg_is_in_recovery() THEN NULL
            WHEN pg_last_wal_receive_lsn() IS NOT DISTINCT FROM pg_last_wal_replay_lsn() THEN 0
            ELSE greatest(extract(epoch FROM now() - pg_last_xact_replay_timestamp()), 0)
       END::float8 AS lag;

-- name: queue_names
-- Every queue's name, in order, without counting anything: the queues with jobs in flight, by
-- a skip scan of each partial index that holds them (one index probe per queue: the next name
-- after the last one found), with history (finished_counts) or with settings.
WITH RECURSIVE
ready AS (
    SELECT min(j.queue) AS queue FROM {schema}.jobs j
    WHERE j.status = 'pending' AND (j.pending_deps = 0 OR NOT j.waits)
    UNION ALL
    SELECT (SELECT min(j.queue) FROM {schema}.jobs j
            WHERE j.status = 'pending' AND (j.pending_deps = 0 OR NOT j.waits)
              AND j.queue > r.queue)
    FROM ready r WHERE r.queue IS NOT NULL
),
waiting AS (
    SELECT min(j.queue) AS queue FROM {schema}.jobs j
    WHERE j.status = 'pending' AND j.pending_deps > 0 AND j.waits
    UNION ALL
    SELECT (SELECT min(j.queue) FROM {schema}.jobs j
            WHERE j.status = 'pending' AND j.pending_deps > 0 AND j.waits AND j.queue > w.queue)
    FROM waiting w WHERE w.queue IS NOT NULL
),
running AS (
    SELECT min(j.queue) AS queue FROM {schema}.jobs j WHERE j.status = 'running'
    UNION ALL
    SELECT (SELECT min(j.queue) FROM {schema}.jobs j
            WHERE j.status = 'running' AND j.queue > r.queue)
    FROM running r WHERE r.queue IS NOT NULL
)
SELECT queue FROM ready WHERE queue IS NOT NULL
UNION SELECT queue FROM waiting WHERE queue IS NOT NULL
UNION SELECT queue FROM running WHERE queue IS NOT NULL
UNION SELECT queue FROM {schema}.finished_counts
UNION SELECT queue FROM {schema}.queue_settings
ORDER BY 1;
