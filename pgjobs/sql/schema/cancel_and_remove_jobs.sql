-- Ending jobs from outside a worker: cancelling (a terminal state) and removing (deleting the
-- rows). Both resolve the jobs' dependents in the same transaction (wake_dependents), so a
-- dependent never keeps counting a prerequisite that can no longer end, and both tell the
-- worker of a running job at once: a notification on channel {schema}_cancels carries its id
-- (at commit), so its handler learns it now rather than at its next fenced write.

-- cancel_jobs: cancel the pending or running jobs among p_ids that belong to tenant p_tenant
-- (or any, with p_any_tenant), locked in id order. A running job's worker finds its token gone
-- at its next fenced write. Returns the ids cancelled.
CREATE OR REPLACE FUNCTION {schema}.cancel_jobs(
    p_ids bigint[], p_tenant text, p_any_tenant boolean, p_channel text
) RETURNS SETOF bigint LANGUAGE plpgsql AS $fn$
DECLARE
    cancelled bigint[];
    running   bigint[];
BEGIN
    WITH target AS (
        SELECT j.id, j.status AS was FROM {schema}.jobs j
        WHERE j.id = ANY(p_ids) AND j.status IN ('pending', 'running')
          AND (p_any_tenant OR j.tenant IS NOT DISTINCT FROM p_tenant)
        ORDER BY j.id
        FOR UPDATE
    ),
    changed AS (
        UPDATE {schema}.jobs j
        SET status = 'cancelled', finished_at = now(), lock_token = NULL, locked_until = NULL
        FROM target WHERE j.id = target.id
        RETURNING j.id, target.was
    )
    SELECT coalesce(array_agg(c.id ORDER BY c.id), '{}'),
           coalesce(array_agg(c.id) FILTER (WHERE c.was = 'running'), '{}')
    INTO cancelled, running FROM changed c;
    PERFORM pg_notify('{schema}_cancels', r::text) FROM unnest(running) AS r;
    IF cardinality(cancelled) > 0 THEN
        PERFORM {schema}.wake_dependents(cancelled, false, p_channel);
    END IF;
    RETURN QUERY SELECT unnest(cancelled);
END
$fn$;

-- remove_jobs: delete the jobs p_ids, which the caller has locked (in id order), after
-- resolving their dependents as for a removed prerequisite (block and ignore release, cascade
-- cancels); with p_quiet, without their 'removed' events (job_events.sql). Returns how many
-- rows were deleted.
DROP FUNCTION IF EXISTS {schema}.remove_jobs(bigint[], text);
CREATE OR REPLACE FUNCTION {schema}.remove_jobs(p_ids bigint[], p_channel text, p_quiet bool)
RETURNS bigint LANGUAGE plpgsql AS $fn$
DECLARE
    deleted bigint;
BEGIN
    IF cardinality(p_ids) = 0 THEN
        RETURN 0;
    END IF;
    PERFORM {schema}.wake_dependents(p_ids, true, p_channel);
    PERFORM pg_notify('{schema}_cancels', j.id::text)
    FROM {schema}.jobs j WHERE j.id = ANY(p_ids) AND j.status = 'running';
    IF p_quiet THEN
        PERFORM {schema}.quiet_next_removal();
    END IF;
    DELETE FROM {schema}.jobs WHERE id = ANY(p_ids);
    GET DIAGNOSTICS deleted = ROW_COUNT;
    RETURN deleted;
END
$fn$;
