DROP FUNCTION IF EXISTS {schema}.may_hand_off(text, int, uuid);

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

DROP FUNCTION IF EXISTS {schema}.lock_idle_slot(uuid);

-- hand_off: the bookkeeping of a job that enqueue_job has just written leased to worker
-- p_worker (whose registration row it has locked): the slot is taken and the token recorded,
-- the job's 'added' and 'active' events are written in that order when it records events, and
-- the row goes to the worker's channel.
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
        -- wake.sql's wake for its readers, written out (the hand-off is its own transaction)
        PERFORM pg_advisory_xact_lock_shared(hashtext('{schema}.wake'), hashtext(p_job.queue));
        IF EXISTS (SELECT FROM {schema}.event_readers r
                   WHERE p_job.queue = ANY(r.queues) AND r.expires_at > now()) THEN
            PERFORM pg_notify('{schema}_events', p_job.queue);
        END IF;
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
