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
-- cancels); with p_quiet, without their 'removed' events (job_events.sql). With
-- p_take_dependents, a dependent waiting for prerequisites (pending, held by them) in the
-- queue of a deleted one, all of whose counted edges come from deleted jobs, is deleted too,
-- and so on up (BullMQ's hard removal: a parent whose last child a clean, drain or obliterate
-- removes goes with it). Such a dependent is locked (in id order) before it is checked, by a
-- statement whose snapshot follows the lock: a prerequisite attached to it meanwhile (which
-- updates its row) is seen, and keeps it. A deleted job's time-bound dedup hold is released
-- and the job kept to follow it (dedup_next) dropped. Returns how many rows were deleted.
DROP FUNCTION IF EXISTS {schema}.remove_jobs(bigint[], text);
DROP FUNCTION IF EXISTS {schema}.remove_jobs(bigint[], text, bool);
CREATE OR REPLACE FUNCTION {schema}.remove_jobs(
    p_ids bigint[], p_channel text, p_quiet bool, p_take_dependents bool
) RETURNS bigint LANGUAGE plpgsql AS $fn$
DECLARE
    deleted  bigint;
    ids      bigint[] := p_ids;
    frontier bigint[] := p_ids;
    taken    bigint[];
BEGIN
    IF cardinality(p_ids) = 0 THEN
        RETURN 0;
    END IF;
    WHILE p_take_dependents AND cardinality(frontier) > 0 LOOP
        SELECT coalesce(array_agg(DISTINCT e.dependent_id), '{}') INTO taken
        FROM {schema}.job_edges e
        JOIN {schema}.jobs p ON p.id = e.prerequisite_id
        JOIN {schema}.jobs d ON d.id = e.dependent_id
        WHERE e.prerequisite_id = ANY(frontier) AND e.state IN ('open', 'blocked')
          AND d.status = 'pending' AND d.pending_deps > 0 AND d.waits AND d.queue = p.queue
          AND NOT (d.id = ANY(ids));
        EXIT WHEN cardinality(taken) = 0;
        PERFORM 1 FROM {schema}.jobs d WHERE d.id = ANY(taken) ORDER BY d.id FOR UPDATE;
        SELECT coalesce(array_agg(d.id ORDER BY d.id), '{}') INTO taken
        FROM {schema}.jobs d
        WHERE d.id = ANY(taken) AND d.status = 'pending' AND d.pending_deps > 0 AND d.waits
          AND NOT EXISTS (SELECT FROM {schema}.job_edges o
                          WHERE o.dependent_id = d.id AND o.state IN ('open', 'blocked')
                            AND NOT (o.prerequisite_id = ANY(ids)));
        ids := ids || taken;
        frontier := taken;
    END LOOP;
    PERFORM {schema}.wake_dependents(ids, true, p_channel);
    PERFORM pg_notify('{schema}_cancels', j.id::text)
    FROM {schema}.jobs j WHERE j.id = ANY(ids) AND j.status = 'running';
    -- A removed job lets go of the time-bound dedup hold it has and of the job kept to
    -- follow it (BullMQ's removeJob deletes the de: key naming the job, and its dn: key).
    DELETE FROM {schema}.dedup_holds h WHERE h.job_id = ANY(ids);
    DELETE FROM {schema}.dedup_next n WHERE n.holder_id = ANY(ids);
    IF p_quiet THEN
        PERFORM {schema}.quiet_next_removal();
    END IF;
    DELETE FROM {schema}.jobs WHERE id = ANY(ids);
    GET DIAGNOSTICS deleted = ROW_COUNT;
    RETURN deleted;
END
$fn$;

-- remove_job_tree: delete job p_id (of tenant p_tenant, or any with p_any_tenant) and every
-- job it waits for, transitively (its prerequisites, theirs, ...: BullMQ's removal of a parent
-- with its children), after resolving the dependents outside the tree as remove_jobs does.
-- The tree is locked (in id order) and read again until no job joined it meanwhile: a
-- prerequisite attached concurrently either committed first (and is taken) or waits for the
-- lock on its dependent (and finds it gone). Nothing is deleted when a job of the tree is
-- running with its lease live (a worker holds it): returns NULL then; else how many rows
-- were deleted (0: no job p_id).
CREATE OR REPLACE FUNCTION {schema}.remove_job_tree(
    p_id bigint, p_tenant text, p_any_tenant bool, p_channel text
) RETURNS bigint LANGUAGE plpgsql AS $fn$
DECLARE
    tree   bigint[];
    locked bigint[] := '{}';
BEGIN
    LOOP
        WITH RECURSIVE t(id) AS (
            SELECT j.id FROM {schema}.jobs j
            WHERE j.id = p_id AND (p_any_tenant OR j.tenant IS NOT DISTINCT FROM p_tenant)
            UNION
            SELECT e.prerequisite_id FROM {schema}.job_edges e JOIN t ON e.dependent_id = t.id
        )
        SELECT coalesce(array_agg(j.id ORDER BY j.id), '{}') INTO tree
        FROM {schema}.jobs j WHERE j.id IN (SELECT t.id FROM t);
        EXIT WHEN tree <@ locked;
        PERFORM 1 FROM {schema}.jobs j
        WHERE j.id = ANY(tree) AND NOT (j.id = ANY(locked))
        ORDER BY j.id FOR UPDATE;
        locked := locked || tree;
    END LOOP;
    IF EXISTS (SELECT FROM {schema}.jobs j
               WHERE j.id = ANY(tree) AND j.status = 'running' AND j.locked_until >= now()) THEN
        RETURN NULL;
    END IF;
    RETURN {schema}.remove_jobs(tree, p_channel, false, false);
END
$fn$;
