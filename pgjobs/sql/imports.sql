-- Importing jobs with their history from another system (pgjobs.imports): one statement per
-- batch, in the caller's transaction. A job key already present keeps its job (the import is
-- idempotent per key); its id is reported back as a duplicate.

-- name: import_jobs
WITH src AS MATERIALIZED (
    SELECT nextval('{schema}.jobs_id_seq') AS id, u.*
    FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::int[], $6::timestamptz[],
                $7::int[], $8::int[], $9::text[], $10::text[], $11::text[], $12::text[],
                $13::text[], $14::text[], $15::bigint[], $16::int[], $17::bool[], $18::text[],
                $19::int[], $20::timestamptz[], $21::timestamptz[], $22::timestamptz[],
                $23::text[], $24::text[], $25::text[], $26::text[])
         WITH ORDINALITY AS u(queue, kind, name, payload, priority, run_at, max_attempts,
                              max_deferrals, backoff, dedup_key, group_key, tenant, metadata,
                              job_key, flow_id, pending_deps, record_events, status, attempts,
                              created_at, started_at, finished_at, output, last_error, progress,
                              retention, ord)
),
ins AS (
    INSERT INTO {schema}.jobs (id, queue, kind, name, payload, priority, run_at, max_attempts,
                               max_deferrals, backoff, dedup_key, group_key, tenant, metadata,
                               job_key, flow_id, pending_deps, record_events, status, attempts,
                               created_at, started_at, finished_at, output, last_error, progress,
                               retention)
    SELECT id, queue, kind, name, payload::jsonb, priority, coalesce(run_at, now()),
           max_attempts, max_deferrals, backoff::jsonb,
           CASE WHEN status = 'pending' THEN dedup_key END, group_key, tenant, metadata::jsonb,
           job_key, flow_id, pending_deps, record_events, status, attempts,
           coalesce(created_at, now()), started_at,
           CASE WHEN status = 'pending' THEN NULL ELSE coalesce(finished_at, now()) END,
           output::jsonb, last_error::jsonb, progress::jsonb, retention::jsonb
    FROM src ORDER BY ord
    ON CONFLICT DO NOTHING
    RETURNING {fragment:inserted_columns}, status
),
counted AS (  -- imported finished jobs count themselves (sql/schema/finished_counts.sql)
    INSERT INTO {schema}.finished_counts (queue, status, n)
    SELECT i.queue, i.status, count(*) FROM ins i WHERE i.status <> 'pending'
    GROUP BY i.queue, i.status
),
{fragment:added_events},
notified AS (  -- in the caller's transaction: every reader (sql/schema/wake.sql)
    SELECT {schema}.wake('{}', array_agg(queue), NULL, false) AS readers FROM added
)
SELECT src.ord, coalesce(ins.id, existing.id) AS id, ins.id IS NOT NULL AS inserted,
       (SELECT readers FROM notified)
FROM src
LEFT JOIN ins ON ins.id = src.id
LEFT JOIN LATERAL (
    SELECT j.id FROM {schema}.jobs j
    WHERE ins.id IS NULL AND j.queue = src.queue
      AND coalesce(j.tenant, '') = coalesce(src.tenant, '')
      AND (j.job_key = src.job_key
           OR (src.status = 'pending' AND j.dedup_key = src.dedup_key
               AND j.status IN ('pending', 'running')))
    ORDER BY j.job_key = src.job_key DESC NULLS LAST
    LIMIT 1
) existing ON true
ORDER BY src.ord;

-- name: import_logs
INSERT INTO {schema}.job_logs (job_id, line)
SELECT job_id, line FROM unnest($1::bigint[], $2::text[]) WITH ORDINALITY AS u(job_id, line, n)
ORDER BY n;

-- name: reserve_ids
-- Make every id the engine hands out from now on greater than $1.
SELECT setval('{schema}.jobs_id_seq', greatest($1::bigint, (SELECT last_value FROM {schema}.jobs_id_seq)));

-- name: hold_dedup_key
-- A time-bound dedup hold with an absolute expiry (an import of a live throttle key).
INSERT INTO {schema}.dedup_holds AS h (queue, tenant, key, job_id, expires_at)
VALUES ($1, coalesce($2::text, ''), $3, $4, $5)
ON CONFLICT (queue, tenant, key) DO UPDATE SET job_id = excluded.job_id, expires_at = excluded.expires_at
WHERE h.expires_at < excluded.expires_at;

-- name: wake_queues
SELECT pg_notify($2, q) FROM unnest($1::text[]) AS q;

-- name: imported
-- The ledger records of the (source, source_id) pairs $1, $2 that exist.
SELECT i.source, i.source_id, i.job_id, i.state, i.checksum
FROM {schema}.imports i
JOIN unnest($1::text[], $2::text[]) AS k(source, source_id) USING (source, source_id);

-- name: record_imports
INSERT INTO {schema}.imports (source, source_id, job_id, state, checksum)
SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::text[], $5::text[])
ON CONFLICT DO NOTHING;

-- name: imports_of
SELECT source, source_id, job_id, state, checksum FROM {schema}.imports
WHERE source = $1 ORDER BY source_id;

-- name: check_imports
-- What each imported job ($1 source, $2 source_id) holds now, against the payload the importer
-- expected ($3, JSON text; null: not compared): the ledger's job, its queue, key, priority and
-- sub-state, and whether the stored payload equals the expected one as jsonb (key order,
-- whitespace and escapes do not matter; PostgreSQL parses the expected text itself).
SELECT k.n, i.job_id, j.queue, j.job_key, j.priority,
       {schema}.sub_state(j.status, j.pending_deps, j.waits, j.run_at, j.attempts) AS sub_state,
       CASE WHEN j.id IS NOT NULL AND k.expected IS NOT NULL
            THEN j.payload = k.expected::jsonb END AS payload_matches
FROM unnest($1::text[], $2::text[], $3::text[]) WITH ORDINALITY AS k(source, source_id, expected, n)
LEFT JOIN {schema}.imports i ON i.source = k.source AND i.source_id = k.source_id
LEFT JOIN {schema}.jobs j ON j.id = i.job_id
ORDER BY k.n;

-- name: assign_job_keys
-- Give each job of queue $1 among ids $2 that has no job key the key of a newly drawn job id
-- (one no job will ever have as its id); returns those jobs' ids and new keys. A job with a
-- key lives in jobs_live, where the key's unique index is (sql/schema/history.sql): one in a
-- history partition moves back.
UPDATE {schema}.jobs j
SET job_key = nextval('{schema}.jobs_id_seq')::text, history_day = 'infinity'
WHERE j.queue = $1 AND j.id = ANY($2::bigint[]) AND j.job_key IS NULL
RETURNING j.id, j.job_key;

-- name: import_sources
-- How many ledger records each source whose name starts with $1 has.
SELECT source, count(*) AS records FROM {schema}.imports
WHERE left(source, length($1::text)) = $1::text
GROUP BY source ORDER BY source;
