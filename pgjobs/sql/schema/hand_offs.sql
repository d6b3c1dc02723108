-- may_hand_off: whether a job of queue p_queue at priority p_priority, due now, may start at
-- once without a claim: the queue has no pause, cap or rate limit in effect, and no job of it
-- is due at that priority or above (the job would jump the queue). A function of the
-- registration found (p_worker, unused but for that), so that the planner cannot make it a
-- one-time filter run before the scan: an enqueue then reads queue_settings and the queue
-- only when there is an idle worker, and otherwise takes no more relation locks than before
-- hand-offs (run at every enqueue, the reads cost concurrent enqueues about 20%, measured:
-- they took each statement past PostgreSQL's 16 fast-path relation locks per backend).
CREATE OR REPLACE FUNCTION {schema}.may_hand_off(p_queue text, p_priority int, p_worker uuid)
RETURNS boolean LANGUAGE plpgsql STABLE AS $fn$
BEGIN
    RETURN NOT EXISTS (SELECT FROM {schema}.queue_settings qs
                       WHERE qs.queue = p_queue
                         AND (qs.paused OR qs.limited_until > now()
                              OR qs.concurrency IS NOT NULL OR qs.group_concurrency IS NOT NULL
                              OR qs.rate_limit IS NOT NULL))
       AND NOT EXISTS (SELECT FROM {schema}.jobs a
                       WHERE a.queue = p_queue AND a.status = 'pending' AND a.pending_deps = 0
                         AND a.priority >= p_priority AND a.run_at <= now());
END
$fn$;

-- withdraw_idle_worker: end worker p_worker's registration (migration 0019) and return the
-- jobs handed to it since it registered that it has not seen (p_seen: the lock tokens its
-- notifications brought), still running under the token they were handed with.
--
-- Concurrency. The DELETE waits for an enqueue that holds the registration (it locks the row
-- before handing a job off) and then reads the row as that enqueue committed it; the SELECT
-- that follows is a new statement, with a snapshot taken after that commit, so the job the
-- enqueue wrote is visible to it. Once the row is gone no enqueue can hand this worker
-- anything more. A token, not an id, names each job: a hand-off whose lease ran out and was
-- rescued and claimed by another worker no longer matches.
CREATE OR REPLACE FUNCTION {schema}.withdraw_idle_worker(p_worker uuid, p_seen uuid[])
RETURNS SETOF {schema}.jobs LANGUAGE plpgsql AS $fn$
DECLARE
    tokens uuid[];
BEGIN
    DELETE FROM {schema}.idle_workers w WHERE w.worker = p_worker RETURNING w.handed INTO tokens;
    IF tokens IS NULL OR cardinality(tokens) = 0 THEN
        RETURN;
    END IF;
    RETURN QUERY
    SELECT j.* FROM {schema}.jobs j
    WHERE j.lock_token = ANY(tokens) AND NOT j.lock_token = ANY(p_seen) AND j.status = 'running';
END
$fn$;

-- claim_for_worker: a worker's claim (claim_jobs) that first withdraws its registration, if
-- p_worker is given: the unseen hand-offs come first and take their slots out of p_limit.
CREATE OR REPLACE FUNCTION {schema}.claim_for_worker(
    p_worker uuid, p_seen uuid[], p_queues text[], p_kinds text[], p_limit int, p_lease float8,
    p_ahead int
) RETURNS SETOF {schema}.jobs LANGUAGE plpgsql AS $fn$
DECLARE
    handed int := 0;
    j      {schema}.jobs;
BEGIN
    IF p_worker IS NOT NULL THEN
        FOR j IN SELECT * FROM {schema}.withdraw_idle_worker(p_worker, p_seen) LOOP
            handed := handed + 1;
            RETURN NEXT j;
        END LOOP;
    END IF;
    RETURN QUERY
    SELECT * FROM {schema}.claim_jobs(p_queues, p_kinds, greatest(p_limit - handed, 0), p_lease,
                                      p_ahead);
END
$fn$;

-- lock_idle_slot: lock worker p_worker's registration for a hand-off, if no other enqueue holds
-- it (SKIP LOCKED: never waits) and, read as of now, it still has a free slot and has not
-- expired. A function, so that the statement that calls it carries no row lock of its own:
-- a FOR UPDATE in enqueue_one_handing itself cost concurrent enqueues about 10% even with no
-- registration to lock (measured).
CREATE OR REPLACE FUNCTION {schema}.lock_idle_slot(p_worker uuid)
RETURNS TABLE (worker uuid, lease float8, channel text) LANGUAGE plpgsql AS $fn$
BEGIN
    RETURN QUERY
    SELECT w.worker, w.lease, w.channel FROM {schema}.idle_workers w
    WHERE w.worker = p_worker AND w.free > 0 AND w.expires_at > now()
    FOR UPDATE SKIP LOCKED;
END
$fn$;

-- hand_off: the bookkeeping of a job that enqueue_one has just written leased to worker
-- p_worker (its registration row is locked by that statement): the slot is taken and the
-- token recorded, the job's 'added' and 'active' events are written in that order when it
-- records events, and the row goes to the worker's channel. Called from the statement's
-- RETURNING for a handed job only, so that an enqueue with no idle worker pays nothing.
CREATE OR REPLACE FUNCTION {schema}.hand_off(p_job {schema}.jobs, p_worker uuid, p_channel text)
RETURNS void LANGUAGE plpgsql AS $fn$
BEGIN
    UPDATE {schema}.idle_workers w
    SET free = w.free - 1, handed = w.handed || p_job.lock_token
    WHERE w.worker = p_worker;
    IF p_job.record_events THEN
        -- one statement, its rows numbered in order: 'added' before 'active'
        INSERT INTO {schema}.job_events (queue, job_id, job_key, tenant, event, prev, data, added)
        VALUES (p_job.queue, NULL, NULL, p_job.tenant, 'added', NULL, NULL,
                ARRAY[ROW(p_job.id, p_job.job_key, p_job.name, p_job.pending_deps, p_job.run_at,
                          p_job.priority)::{schema}.added_job]),
               (p_job.queue, p_job.id, p_job.job_key, p_job.tenant, 'active', 'pending',
                jsonb_build_object('attempt', p_job.attempts), NULL);
        PERFORM pg_notify('{schema}_events', p_job.queue);
    END IF;
    PERFORM pg_notify(p_channel, json_build_object(
        'id', p_job.id, 'queue', p_job.queue, 'kind', p_job.kind, 'name', p_job.name,
        'payload', p_job.payload::text, 'priority', p_job.priority, 'run_at', p_job.run_at,
        'attempts', p_job.attempts, 'max_attempts', p_job.max_attempts,
        'deferrals', p_job.deferrals, 'max_deferrals', p_job.max_deferrals,
        'backoff', p_job.backoff::text, 'lock_token', p_job.lock_token, 'tenant', p_job.tenant,
        'metadata', p_job.metadata::text, 'flow_id', p_job.flow_id,
        'progress', p_job.progress::text, 'job_key', p_job.job_key,
        'created_at', p_job.created_at, 'schedule', p_job.schedule)::text);
END
$fn$;
