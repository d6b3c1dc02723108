-- The job event log (migration 0004). Readers follow it in (txid, id) order and only read
-- transactions older than the oldest one still running, so nothing lands behind a cursor.

-- name: publish_event
-- Append a queue-level event ($2 on queue $1, data $3, tenant $4) and wake readers ($5).
WITH ins AS (
    INSERT INTO {schema}.job_events (queue, event, data, tenant)
    VALUES ($1, $2, $3::text::jsonb, $4)
    RETURNING queue
)
SELECT pg_notify($5, queue) FROM ins;

-- name: events_start
-- Where a reader that wants only new events starts: the oldest running transaction, and the
-- snapshot whose already-committed transactions it must skip.
SELECT pg_snapshot_xmin(pg_current_snapshot())::text AS xmin, pg_current_snapshot()::text AS snapshot;

-- name: read_events
-- Up to $5 events of queues $1 after cursor ($2, $3), skipping transactions visible in
-- snapshot $4 (when given), scoped to tenant $7 unless $6.
SELECT id, txid::text AS txid, queue, job_id, job_key, tenant, event, prev, data::text AS data, at
FROM {schema}.job_events
WHERE queue = ANY($1::text[])
  AND (txid, id) > ($2::text::xid8, $3::bigint)
  AND txid < pg_snapshot_xmin(pg_current_snapshot())
  AND ($4::text IS NULL OR NOT pg_visible_in_snapshot(txid, $4::text::pg_snapshot))
  AND ($6::bool OR tenant IS NOT DISTINCT FROM $7::text)
ORDER BY txid, id
LIMIT $5;

-- name: trim_events
-- Keep the newest $1 events of each queue, and none older than $2 seconds; returns how many went.
WITH gone AS (
DELETE FROM {schema}.job_events e
USING (
    SELECT txid, id FROM (
        SELECT txid, id, at,
               row_number() OVER (PARTITION BY queue ORDER BY txid DESC, id DESC) AS rn
        FROM {schema}.job_events
    ) ranked
    WHERE rn > $1 OR at < now() - make_interval(secs => $2::float8)
) old
WHERE e.txid = old.txid AND e.id = old.id
RETURNING 1
)
SELECT count(*) FROM gone;
