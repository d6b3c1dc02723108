-- rescue_stalled_jobs: put back up to p_limit running jobs whose lease ended (their worker
-- stopped heartbeating: killed, partitioned, stuck). Returns each job rescued and the status
-- it was given.
--
-- In a queue without a stall budget (queue_settings.max_stalls NULL) the attempt it was on
-- counts as used: pending again, or dead on its last attempt. With a budget the attempt is
-- given back and the stall counted, and the job is pending again; once it has stalled more
-- than max_stalls times (BullMQ's maxStalledCount) its failure is deferred: its last_error
-- is marked "deferred": true, and the next claim records that error without running the
-- handler (runner.py), as BullMQ's next worker fails such a job. A schedule's run is never failed for
-- stalling (BullMQ spares repeatable jobs too). Either way a job put back keeps its run_at, so
-- it resumes its place in the claim order (BullMQ likewise pushes a stalled job to the front
-- of `wait`). Jobs that died resolve their dependents; the queues of jobs put back are woken.
-- Returns each job rescued: id, the status it was given, its queue and job key.
--
-- SKIP LOCKED: a row another transaction holds (its worker writing the outcome right now, a
-- cancel, a purge) is left to it; the fenced outcome wins or finds the token gone.
CREATE OR REPLACE FUNCTION {schema}.rescue_stalled_jobs(p_limit int, p_channel text)
RETURNS TABLE (id bigint, status text, queue text, job_key text) LANGUAGE plpgsql AS $fn$
DECLARE
    ids      bigint[];
    statuses text[];
    rqueues  text[];
    keys     text[];
    died     bigint[];
    queues   text[];
BEGIN
    WITH over AS (
        SELECT j.id, qs.max_stalls AS budget,
               qs.max_stalls IS NOT NULL AND j.stalls + 1 > qs.max_stalls
                   AND j.schedule IS NULL AS doomed,
               qs.max_stalls IS NULL AND j.attempts >= j.max_attempts AS dies,
               j.attempts, j.stalls
        FROM {schema}.jobs j
        LEFT JOIN {schema}.queue_settings qs ON qs.queue = j.queue
        WHERE j.status = 'running' AND j.locked_until < now()
        ORDER BY j.locked_until
        LIMIT p_limit
        FOR UPDATE OF j SKIP LOCKED
    ),
    stalled AS (
        SELECT o.id, o.budget, o.doomed, o.dies,
               jsonb_build_object(
                   'type', 'LeaseExpired', 'attempt', o.attempts, 'at', now(),
                   'stalls', o.stalls + 1,
                   'message', CASE WHEN o.doomed THEN 'job stalled more than allowable limit'
                                   ELSE format('lease expired during attempt %s: its worker'
                                               ' stopped heartbeating', o.attempts) END) AS error
        FROM over o
    ),
    rescued AS (
        UPDATE {schema}.jobs j
        SET status = CASE WHEN s.dies THEN 'dead' ELSE 'pending' END,
            attempts = CASE WHEN s.budget IS NULL THEN j.attempts ELSE j.attempts - 1 END,
            stalls = j.stalls + 1,
            lock_token = NULL, locked_until = NULL,
            finished_at = CASE WHEN s.dies THEN now() END,
            last_error = CASE WHEN s.doomed THEN s.error || '{"deferred": true}'
                              ELSE s.error END,
            errors = {schema}.with_attempt_error(j.errors, s.error)
        FROM stalled s
        WHERE j.id = s.id
        RETURNING j.id, j.status, j.queue, j.job_key,
                  EXISTS (SELECT FROM {schema}.job_edges e WHERE e.prerequisite_id = j.id)
                      AS prerequisite  -- in a flow or by add_dependency: resolve its dependents
    )
    SELECT coalesce(array_agg(r.id ORDER BY r.id), '{}'),
           coalesce(array_agg(r.status ORDER BY r.id), '{}'),
           coalesce(array_agg(r.queue ORDER BY r.id), '{}'),
           coalesce(array_agg(r.job_key ORDER BY r.id), '{}'),
           coalesce(array_agg(r.id) FILTER (WHERE r.status = 'dead' AND r.prerequisite), '{}'),
           coalesce(array_agg(DISTINCT r.queue) FILTER (WHERE r.status = 'pending'), '{}')
    INTO ids, statuses, rqueues, keys, died, queues
    FROM rescued r;
    PERFORM pg_notify(p_channel, q) FROM unnest(queues) AS q;
    IF cardinality(died) > 0 THEN
        PERFORM {schema}.wake_dependents(died, false, p_channel);
    END IF;
    RETURN QUERY SELECT * FROM unnest(ids, statuses, rqueues, keys);
END
$fn$;
