-- The job event log (table job_events). Readers follow it in (txid, id) order and only read
-- transactions older than the oldest one still running, so nothing lands behind a cursor.

-- name: publish_event
-- Append a queue-level event ($2 on queue $1, data $3, tenant $4) and wake readers ($5).
WITH ins AS (
    INSERT INTO {schema}.job_events (queue, event, data, tenant)
    VALUES ($1, $2, $3::text::jsonb, $4)
    RETURNING queue
)
SELECT pg_notify($5, queue) FROM ins;

-- name: register_event_reader
-- Reader $1 follows queues $2 for $3 seconds: writes of their events notify it (event_readers,
-- sql/schema/wake.sql). Returns the server's incarnation and how far its WAL is on disk
-- (sql/schema/event_positions.sql).
SELECT {schema}.current_incarnation()::text AS incarnation,
       (pg_current_wal_flush_lsn() - '0/0'::pg_lsn)::bigint AS flushed
FROM {schema}.register_event_reader($1::uuid, $2::text[], $3::float8);

-- name: end_event_reader
DELETE FROM {schema}.event_readers WHERE reader = $1::uuid;

-- name: events_start
-- Where a reader that wants only new events starts: the oldest running transaction, and the
-- snapshot whose already-committed transactions it must skip; and the server's incarnation.
SELECT pg_snapshot_xmin(pg_current_snapshot())::text AS xmin, pg_current_snapshot()::text AS snapshot,
       {schema}.current_incarnation()::text AS incarnation;

-- name: mark_event_stream_start
-- A durable write after a stream's start (sql/schema/event_positions.sql): its transaction id
-- is newer than every id the start's snapshot names, and reaches the disk before this returns.
WITH durable AS (SELECT set_config('synchronous_commit', 'on', true))
INSERT INTO {schema}.event_stream_starts AS s (one, at)
SELECT true, now() FROM durable
ON CONFLICT (one) DO UPDATE SET at = excluded.at
RETURNING {schema}.current_incarnation()::text AS incarnation;

-- name: read_events
-- Up to $5 events of queues $1 after cursor ($2, $3, $8), skipping transactions visible in
-- snapshot $4 (when given), scoped to tenant $7 unless $6, if the server's incarnation is still
-- $9. A row of several jobs' 'added' events (column `added`) gives one event per job,
-- `part` its position (from 1); any other row is one event, part 0.
-- The first row always carries the incarnation, the WAL insert position after every commit
-- the read can see, and how far the WAL is on disk (sql/schema/event_positions.sql); with no
-- event (none, or another incarnation) it is the only row, its event columns NULL.
WITH here AS MATERIALIZED (
    SELECT {schema}.current_incarnation() AS incarnation,
           (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::bigint AS inserted,
           (pg_current_wal_flush_lsn() - '0/0'::pg_lsn)::bigint AS flushed
)
SELECT here.incarnation::text AS incarnation, here.inserted, here.flushed, ev.*
FROM here
LEFT JOIN LATERAL (
    SELECT e.id, e.txid::text AS txid, e.queue, coalesce(b.job_id, e.job_id) AS job_id,
           CASE WHEN e.added IS NULL THEN e.job_key ELSE b.job_key END AS job_key,
           e.tenant, e.event, e.prev,
           (CASE WHEN e.added IS NULL THEN e.data
                 ELSE {schema}.added_event_data(b.name, b.pending_deps, b.run_at, b.priority, e.at)
            END)::text AS data,
           e.at, coalesce(b.part, 0) AS part
    FROM {schema}.job_events e
    LEFT JOIN LATERAL unnest(e.added) WITH ORDINALITY
        AS b(job_id, job_key, name, pending_deps, run_at, priority, part) ON true
    WHERE here.incarnation = $9::uuid
      AND e.queue = ANY($1::text[])
      AND (e.txid, e.id) >= ($2::text::xid8, $3::bigint)
      AND (e.txid, e.id, coalesce(b.part, 0)) > ($2::text::xid8, $3::bigint, $8::bigint)
      AND e.txid < pg_snapshot_xmin(pg_current_snapshot())
      AND ($4::text IS NULL OR NOT pg_visible_in_snapshot(e.txid, $4::text::pg_snapshot))
      AND ($6::bool OR e.tenant IS NOT DISTINCT FROM $7::text)
    ORDER BY e.txid, e.id, part
    LIMIT $5
) ev ON true
ORDER BY ev.txid::xid8, ev.id, ev.part;

-- name: trim_queue_events
-- Keep the newest $2 events of queue $1 (every tenant's), as trim_events does for each queue:
-- a row of several jobs' events counts as that many and goes whole, once the newer rows hold
-- $2 events. Returns how many events went. The cutoff is found by reading the queue's rows
-- newest first through job_events_queue_idx and stopping at the first row that goes (the
-- running sum is computed row by row), so a trim reads about $2 rows, not the queue's whole
-- log; the rows older than it are then deleted by a range of the same index. One statement: a
-- row written by a transaction still open is not seen and stays, whatever its position.
WITH cutoff AS (
    SELECT txid, id FROM (
        SELECT txid, id,
               sum(coalesce(cardinality(added), 1))
                   OVER (ORDER BY txid DESC, id DESC ROWS UNBOUNDED PRECEDING)
               - coalesce(cardinality(added), 1) AS newer
        FROM {schema}.job_events
        WHERE queue = $1
        ORDER BY txid DESC, id DESC
    ) ranked
    WHERE newer >= $2
    LIMIT 1
),
gone AS (
    DELETE FROM {schema}.job_events e
    USING cutoff c
    WHERE e.queue = $1 AND (e.txid, e.id) <= (c.txid, c.id)
    RETURNING coalesce(cardinality(e.added), 1) AS events
)
SELECT coalesce(sum(events), 0)::bigint FROM gone;

-- name: trim_events
-- Keep the newest $1 events of each queue, and none older than $2 seconds; returns how many
-- went. A row of several jobs' events (column `added`) counts as that many and goes whole,
-- once the newer rows hold $1 events.
WITH gone AS (
DELETE FROM {schema}.job_events e
USING (
    SELECT txid, id FROM (
        SELECT txid, id, at,
               sum(coalesce(cardinality(added), 1))
                   OVER (PARTITION BY queue ORDER BY txid DESC, id DESC)
               - coalesce(cardinality(added), 1) AS newer
        FROM {schema}.job_events
    ) ranked
    WHERE newer >= $1 OR at < now() - make_interval(secs => $2::float8)
) old
WHERE e.txid = old.txid AND e.id = old.id
RETURNING coalesce(cardinality(e.added), 1) AS events
)
SELECT coalesce(sum(events), 0)::bigint FROM gone;
