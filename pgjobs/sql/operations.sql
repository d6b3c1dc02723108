-- Operator actions on jobs: cancel, requeue, promote, edit, logs, purge. Each runs inside one
-- transaction opened by pgjobs.ops; {where} is a JobFilter rendered by sql/filters.py.

-- name: cancel_jobs
-- Cancel pending or running jobs ($1 ids) of tenant $2 (or any, $3), resolving their
-- dependents and waking their queues ($4); returns the ids cancelled.
SELECT cancelled AS id FROM {schema}.cancel_jobs($1::bigint[], $2::text, $3::bool, $4::text) AS cancelled;

-- name: in_flight_ids_where
-- The pending or running jobs matching {where}, oldest first: what a cancel by filter cancels.
SELECT j.id FROM {schema}.jobs j
WHERE {where} AND {fragment:in_flight}
ORDER BY j.id;

-- name: flow_job_ids
-- The jobs of flow $1 in statuses $2, for tenant $3 (or any, $4).
SELECT id FROM {schema}.jobs
WHERE flow_id = $1 AND status = ANY($2::text[]) AND ($4::bool OR tenant IS NOT DISTINCT FROM $3::text)
ORDER BY id;

-- name: notify_queues
SELECT pg_notify($2, q) FROM unnest($1::text[]) AS q;

-- name: requeue_where
-- A manual re-drive of finished jobs matching {where}: due now, and a new life cycle (attempts,
-- deferrals and stalls reset) unless $1 is false (they are kept: the next run counts on). With $2
-- the finished run's outcome goes too (started_at, output, and the last_error of a job that did
-- not complete: a completed job keeps its last failed attempt's), else it stays readable. A job
-- whose dedup key another in-flight job holds is skipped, and of several
-- matching jobs sharing a key only the newest is re-driven. Blocked edges it failed stay
-- counted and are reopened. The job's own count of open prerequisites is kept as it is: it is
-- exact in every status (resolve_dependents keeps it whatever the dependent's status).
-- Returns the re-driven ids and queues.
WITH target AS (
    SELECT j.id FROM {schema}.jobs j
    WHERE {where} AND j.status IN ('dead', 'cancelled', 'completed')
      AND (j.dedup_key IS NULL OR NOT EXISTS (
            SELECT FROM {schema}.jobs h
            WHERE h.queue = j.queue AND h.dedup_key = j.dedup_key
              AND coalesce(h.tenant, '') = coalesce(j.tenant, '') AND h.status IN ('pending', 'running')))
    ORDER BY j.id
    FOR UPDATE
),
one_per_key AS (
    SELECT DISTINCT ON (coalesce(j.dedup_key, j.id::text), j.queue, coalesce(j.tenant, '')) j.id
    FROM {schema}.jobs j JOIN target t ON t.id = j.id
    ORDER BY coalesce(j.dedup_key, j.id::text), j.queue, coalesce(j.tenant, ''), j.id DESC
),
redriven AS (
    UPDATE {schema}.jobs j
    SET status = 'pending', run_at = now(), finished_at = NULL, lock_token = NULL,
        locked_until = NULL, history_day = 'infinity',  -- back to jobs_live (migration 0007)
        attempts = CASE WHEN $1::bool THEN 0 ELSE j.attempts END,
        deferrals = CASE WHEN $1::bool THEN 0 ELSE j.deferrals END,
        stalls = CASE WHEN $1::bool THEN 0 ELSE j.stalls END,
        started_at = CASE WHEN $2::bool THEN NULL ELSE j.started_at END,
        output = CASE WHEN $2::bool THEN NULL ELSE j.output END,
        -- a re-drive runs it: 'deferred' goes (rescue_stalled_jobs.sql)
        last_error = CASE WHEN $2::bool AND j.status <> 'completed' THEN NULL
                          ELSE j.last_error - 'deferred' END
    FROM one_per_key o WHERE j.id = o.id
    RETURNING j.id, j.queue
),
reopened AS (
    UPDATE {schema}.job_edges e SET state = 'open', failure = NULL
    FROM redriven r WHERE e.prerequisite_id = r.id AND e.state = 'blocked'
)
SELECT id, queue FROM redriven;

-- name: promote
-- Make a delayed pending job due now. Returns its queue when it was delayed.
UPDATE {schema}.jobs SET run_at = now()
WHERE id = $1 AND status = 'pending' AND run_at > now()
  AND ($3::bool OR tenant IS NOT DISTINCT FROM $2::text)
RETURNING queue, pg_notify($4, queue);

-- name: duplicate_job
-- A copy of job $1 (of tenant $2 unless $3) as a new pending job, due now: the same queue,
-- kind, name, payload, priority, attempts and deferrals allowed, backoff, retention, group,
-- tenant, metadata (without the schedule-run mark $5: a copy is no run of a schedule) and
-- event recording; no job key, dedup key, flow or prerequisites. Its 'added' event and the
-- wake-up of an idle worker as for any enqueue ($4: the notification channel). Returns the
-- new id, or no row when there is no such job.
WITH ins AS (
    INSERT INTO {schema}.jobs (queue, kind, name, payload, priority, run_at, max_attempts,
                               max_deferrals, backoff, group_key, tenant, metadata, retention,
                               record_events)
    SELECT j.queue, j.kind, j.name, j.payload, j.priority, now(), j.max_attempts,
           j.max_deferrals, j.backoff, j.group_key, j.tenant,
           CASE WHEN jsonb_typeof(j.metadata) = 'object' AND j.metadata ? $5::text
                THEN nullif(j.metadata - $5::text, '{}') ELSE j.metadata END,
           j.retention, j.record_events
    FROM {schema}.jobs j
    WHERE j.id = $1 AND ($3::bool OR j.tenant IS NOT DISTINCT FROM $2::text)
    RETURNING {fragment:inserted_columns}
),
{fragment:added_events}
SELECT ins.id, {schema}.wake(ARRAY[ins.queue], (SELECT array_agg(queue) FROM added), $4, true)
FROM ins;

-- name: job_kind
SELECT kind FROM {schema}.jobs WHERE id = $1 AND ($3::bool OR tenant IS NOT DISTINCT FROM $2::text);

-- name: update_payload
UPDATE {schema}.jobs SET payload = $4::text::jsonb
WHERE id = $1 AND ($3::bool OR tenant IS NOT DISTINCT FROM $2::text)
RETURNING id;

-- name: change_priority
-- Set job $1's priority to $4 (tenant $2, or any with $3). A job waiting its turn (pending, due,
-- no open prerequisites holding it back) is placed among the jobs of that priority by $5: 'first' (due at a
-- time mirrored about 2000-01-01, as a LIFO enqueue is: before every job enqueued before),
-- 'last' (due now: after every job already due), 'keep' (its due time).
UPDATE {schema}.jobs
SET priority = $4,
    run_at = CASE WHEN status = 'pending' AND (pending_deps = 0 OR NOT waits) AND run_at <= now()
                  THEN CASE $5::text
                       WHEN 'first' THEN timestamptz '2000-01-01 00:00:00+00'
                                         - (clock_timestamp() - timestamptz '2000-01-01 00:00:00+00')
                       WHEN 'last' THEN now()
                       ELSE run_at END
                  ELSE run_at END
WHERE id = $1 AND ($3::bool OR tenant IS NOT DISTINCT FROM $2::text)
RETURNING id;

-- name: append_log
-- Append a log line to job $1 (tenant-scoped); keep only the newest $5 lines when $5 is set.
WITH job AS (  -- locked as a foreign key would: a delete waits, and its trigger sees the line
    SELECT id FROM {schema}.jobs
    WHERE id = $1 AND ($3::bool OR tenant IS NOT DISTINCT FROM $2::text)
    FOR KEY SHARE
),
added AS (
    INSERT INTO {schema}.job_logs (job_id, line) SELECT id, $4 FROM job RETURNING job_id, seq
),
trimmed AS (
    -- The line just added is not visible here: keeping the newest $5 - 1 older lines keeps $5.
    DELETE FROM {schema}.job_logs l
    WHERE $5::int IS NOT NULL AND l.job_id = $1 AND EXISTS (SELECT FROM added)
      AND l.seq NOT IN (SELECT seq FROM {schema}.job_logs
                        WHERE job_id = $1 ORDER BY seq DESC LIMIT greatest($5::int - 1, 0))
)
-- The lines the log holds now (0: no such job): those seen before this statement, plus the
-- new one, at most $5.
SELECT CASE WHEN EXISTS (SELECT FROM added)
            THEN least((SELECT count(*) FROM {schema}.job_logs WHERE job_id = $1) + 1,
                       coalesce($5::int, 2147483647))
            ELSE 0 END;

-- name: append_log_fenced
-- Append a log line for a running job, only while lock token $2 still owns it; the lines the
-- log holds now (none: not owned).
WITH job AS (
    SELECT id FROM {schema}.jobs WHERE id = $1 AND lock_token = $2 AND status = 'running'
    FOR KEY SHARE
),
added AS (
    INSERT INTO {schema}.job_logs (job_id, line) SELECT id, $3 FROM job RETURNING seq
)
SELECT (SELECT count(*) FROM {schema}.job_logs WHERE job_id = $1) + 1 FROM added;

-- name: set_progress_unfenced
-- An operator's progress write on job $1 (tenant $2, or any with $3): $4. Returns the id.
UPDATE {schema}.jobs SET progress = $4::text::jsonb
WHERE id = $1 AND ($3::bool OR tenant IS NOT DISTINCT FROM $2::text)
RETURNING id;

-- name: read_logs
-- Log lines of job $1 (tenant-scoped), oldest first, paginated; with the total count.
SELECT l.line, l.created_at, count(*) OVER () AS total
FROM {schema}.job_logs l JOIN {schema}.jobs j ON j.id = l.job_id
WHERE l.job_id = $1 AND ($3::bool OR j.tenant IS NOT DISTINCT FROM $2::text)
ORDER BY l.seq
OFFSET $4 LIMIT $5;

-- name: read_logs_newest_first
-- Log lines of job $1 (tenant-scoped), newest first, paginated; with the total count. The
-- primary key (job_id, seq) read backwards, so no sort of a chatty job's lines.
SELECT l.line, l.created_at, count(*) OVER () AS total
FROM {schema}.job_logs l JOIN {schema}.jobs j ON j.id = l.job_id
WHERE l.job_id = $1 AND ($3::bool OR j.tenant IS NOT DISTINCT FROM $2::text)
ORDER BY l.seq DESC
OFFSET $4 LIMIT $5;

-- name: purge_lock
-- Lock the rows a purge will delete, in id order so that concurrent purges cannot deadlock on
-- them. Running rows are included with the cancel policy ($1), and with the expired policy
-- those whose lease has run out; the others are not locked at all, so their workers'
-- completions proceed. (A worker renewing a lease past this check finds its job gone: its
-- fenced writes are no-ops.)
SELECT j.id FROM {schema}.jobs j
WHERE {where}
  AND (j.status <> 'running' OR $1::text = 'cancel'
       OR ($1::text = 'expired' AND j.locked_until < now()))
ORDER BY j.id
FOR UPDATE;

-- name: remove_jobs
-- Delete the jobs $1 (locked by purge_lock), resolving their dependents first; $2: channel;
-- $3: without their 'removed' events; $4: with the dependents left waiting for them alone.
SELECT {schema}.remove_jobs($1::bigint[], $2::text, $3::bool, $4::bool);

-- name: count_running_where
SELECT count(*) FROM {schema}.jobs j WHERE {where} AND j.status = 'running';

-- name: prerequisite_results
-- What a dependent can read of its prerequisites: status, output, and the failure an
-- ignore/continue/cascade edge recorded; a completed prerequisite since deleted as its
-- satisfied edge kept it (job_edges_integrity.sql). Nothing unless dependent $1 belongs to
-- tenant $2 (or $3: any tenant).
SELECT e.prerequisite_id AS id,
       coalesce(j.kind, e.removed_prerequisite ->> 'kind') AS kind,
       coalesce(j.name, e.removed_prerequisite ->> 'name') AS name,
       coalesce(j.queue, e.removed_prerequisite ->> 'queue') AS queue,
       CASE WHEN j.id IS NULL THEN e.removed_prerequisite ->> 'job_key' ELSE j.job_key END
           AS job_key,
       coalesce(j.status, 'completed') AS status,
       CASE WHEN j.id IS NULL THEN e.removed_prerequisite -> 'output' ELSE j.output END
           AS output,
       e.policy, e.state, e.failure
FROM {schema}.job_edges e LEFT JOIN {schema}.jobs j ON j.id = e.prerequisite_id
WHERE e.dependent_id = $1
  AND ($3::bool OR EXISTS (SELECT FROM {schema}.jobs d
                           WHERE d.id = $1 AND d.tenant IS NOT DISTINCT FROM $2::text))
ORDER BY e.prerequisite_id;

-- name: reschedule
-- Make pending job $1 (tenant $2, or any with $3) due in $4 seconds. Returns its queue.
UPDATE {schema}.jobs SET run_at = now() + make_interval(secs => $4::float8)
WHERE id = $1 AND status = 'pending' AND ($3::bool OR tenant IS NOT DISTINCT FROM $2::text)
RETURNING queue, pg_notify($5, queue);
