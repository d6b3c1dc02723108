DROP FUNCTION IF EXISTS {schema}.may_hand_off(text, int, uuid);
DROP FUNCTION IF EXISTS {schema}.hand_off({schema}.jobs, uuid, text);  -- written out in enqueue_job

-- withdraw_idle_worker: end worker p_worker's registration (table idle_workers) and return the
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
-- p_rate_limit and p_rate_period: the worker's own rate limit (claim_jobs; NULL: none). A
-- worker with one registers without free slots (idle_state), so it is never handed a job.
-- p_worker_name: the worker's name, recorded on each job it starts (jobs.worker).
-- p_group_*: the worker's cap and rate limit for each group of a grouped queue (claim_jobs).
DROP FUNCTION IF EXISTS {schema}.claim_for_worker(uuid, uuid[], text[], text[], int, float8, int);
DROP FUNCTION IF EXISTS {schema}.claim_for_worker(uuid, uuid[], text[], text[], int, float8, int,
                                                  int, float8);
DROP FUNCTION IF EXISTS {schema}.claim_for_worker(uuid, uuid[], text[], text[], int, float8, int,
                                                  int, float8, text);
CREATE OR REPLACE FUNCTION {schema}.claim_for_worker(
    p_worker uuid, p_seen uuid[], p_queues text[], p_kinds text[], p_limit int, p_lease float8,
    p_ahead int, p_rate_limit int DEFAULT NULL, p_rate_period float8 DEFAULT NULL,
    p_worker_name text DEFAULT NULL, p_group_concurrency int DEFAULT NULL,
    p_group_rate_limit int DEFAULT NULL, p_group_rate_period float8 DEFAULT NULL
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
                                      p_ahead, p_rate_limit, p_rate_period, p_worker_name,
                                      p_group_concurrency, p_group_rate_limit,
                                      p_group_rate_period);
END
$fn$;

DROP FUNCTION IF EXISTS {schema}.lock_idle_slot(uuid);

