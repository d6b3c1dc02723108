-- resolve_dependents: the one place where a prerequisite's end reaches its dependents. Called
-- by finish_jobs (outcomes), the rescue of a job that died of its last lease, cancels, and
-- purges (p_removed: the prerequisites are about to be deleted).
--
-- Completed releases an edge; a failure applies the edge's policy (block keeps counting until
-- the prerequisite is re-driven or removed; cascade fails the dependent, transitively; ignore
-- and continue release it with the failure recorded). Returns the ids of dependents that became
-- claimable.
CREATE OR REPLACE FUNCTION {schema}.resolve_dependents(p_ids bigint[], p_removed boolean DEFAULT false)
RETURNS SETOF bigint LANGUAGE plpgsql AS $fn$
DECLARE
    frontier  bigint[] := p_ids;
    removing  boolean  := p_removed;
    pre       bigint[];
    dep       bigint[];
    pol       text[];
    outcome   text[];
    cascaded  bigint[];
BEGIN
    WHILE cardinality(frontier) > 0 LOOP
        -- The open edges leaving this round's prerequisites, locked in a stable order.
        SELECT coalesce(array_agg(x.prerequisite_id), '{}'), coalesce(array_agg(x.dependent_id), '{}'),
               coalesce(array_agg(x.policy), '{}'), coalesce(array_agg(x.outcome), '{}')
        INTO pre, dep, pol, outcome
        FROM (
            SELECT e.prerequisite_id, e.dependent_id, e.policy,
                   CASE WHEN j.status = 'completed' THEN 'completed'
                        WHEN removing THEN 'removed' ELSE j.status END AS outcome
            FROM {schema}.job_edges e JOIN {schema}.jobs j ON j.id = e.prerequisite_id
            WHERE e.prerequisite_id = ANY(frontier) AND e.state IN ('open', 'blocked')
              AND (removing OR j.status IN ('completed', 'dead', 'cancelled'))
            ORDER BY e.dependent_id, e.prerequisite_id
            FOR UPDATE OF e
        ) x;
        EXIT WHEN cardinality(pre) = 0;

        -- Block keeps counting while its prerequisite is failed (a re-drive or a removal
        -- releases it); every other policy releases the edge and keeps the failure readable.
        UPDATE {schema}.job_edges e
        SET state = CASE
                WHEN r.outcome = 'completed' THEN 'satisfied'
                WHEN r.policy = 'block' AND r.outcome <> 'removed' THEN 'blocked'
                WHEN r.policy = 'block' THEN 'released'
                WHEN r.policy = 'cascade' THEN 'failed'
                ELSE 'ignored' END,
            failure = CASE WHEN r.outcome = 'completed' THEN NULL ELSE j.last_error END
        FROM unnest(pre, dep, pol, outcome) AS r(prerequisite_id, dependent_id, policy, outcome)
        JOIN {schema}.jobs j ON j.id = r.prerequisite_id
        WHERE e.prerequisite_id = r.prerequisite_id AND e.dependent_id = r.dependent_id;

        -- continue: the dependent runs now; its other open edges stop counting.
        UPDATE {schema}.job_edges e SET state = 'released'
        FROM unnest(dep, pol, outcome) AS r(dependent_id, policy, outcome)
        WHERE r.policy = 'continue' AND r.outcome <> 'completed'
          AND e.dependent_id = r.dependent_id AND e.state IN ('open', 'blocked');

        -- Recount pending_deps of every dependent touched: exact, whatever happened above.
        -- Edges of prerequisites being removed are about to vanish with them.
        UPDATE {schema}.jobs d
        SET pending_deps = (SELECT count(*) FROM {schema}.job_edges e
                            WHERE e.dependent_id = d.id AND e.state IN ('open', 'blocked')
                              AND NOT (removing AND e.prerequisite_id = ANY(frontier)))
        WHERE d.id = ANY(dep);

        -- cascade: a pending dependent fails with its prerequisite (dead, or cancelled when the
        -- prerequisite was cancelled or removed); its own dependents are resolved next round.
        WITH failed AS (
            UPDATE {schema}.jobs d
            SET status = CASE WHEN r.outcome = 'dead' THEN 'dead' ELSE 'cancelled' END,
                finished_at = now(),
                last_error = jsonb_build_object(
                    'type', 'DependencyFailed', 'prerequisite', r.prerequisite_id,
                    'message', format('prerequisite job %s ended %s', r.prerequisite_id, r.outcome))
            FROM (SELECT DISTINCT ON (x.dependent_id) x.*
                  FROM unnest(pre, dep, pol, outcome) AS x(prerequisite_id, dependent_id, policy, outcome)
                  WHERE x.policy = 'cascade' AND x.outcome <> 'completed'
                  ORDER BY x.dependent_id, x.prerequisite_id) r
            WHERE d.id = r.dependent_id AND d.status = 'pending'
            RETURNING d.id
        )
        SELECT coalesce(array_agg(id), '{}') INTO cascaded FROM failed;

        RETURN QUERY
            SELECT d.id FROM {schema}.jobs d
            WHERE d.id = ANY(dep) AND d.status = 'pending' AND d.pending_deps = 0;

        frontier := cascaded;
        removing := false;
    END LOOP;
END
$fn$;
