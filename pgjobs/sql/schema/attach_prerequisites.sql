-- attach_prerequisites: add edges prerequisite p_pre[i] -> dependent p_dep[i] (policy, state
-- and recorded failure each given; an existing edge is kept), to jobs that may already exist
-- and be running: a child added to a running parent, an imported flow. Returns how many edges
-- were added.
--
-- A prerequisite that ends while its new edge is being written must not leave the edge open
-- for ever: the prerequisites are locked (FOR SHARE, in id order) before the edges are
-- written, so a finish of one either committed before (the statements below, with fresh
-- snapshots, see it ended and resolve its edges now) or waits for this transaction (and its
-- own resolution, a later statement, sees the edges). Dependents gain one count per counted
-- edge (open, blocked), taken on their locked rows, as resolve_dependents takes them off.
--
-- The edges have no foreign keys (job_edges_integrity.sql): the dependents are locked too (FOR KEY
-- SHARE, the lock a foreign key check took), so neither end can be deleted until this
-- transaction ends, and an id whose job is gone (deleted before the lock) is refused with
-- foreign_key_violation, naming it, before anything is written (job_edges_integrity.sql).
CREATE OR REPLACE FUNCTION {schema}.attach_prerequisites(
    p_pre bigint[], p_dep bigint[], p_policy text[], p_state text[], p_failure jsonb[],
    p_channel text
) RETURNS int LANGUAGE plpgsql AS $fn$
DECLARE
    counted bigint[];
    added   int;
    ended   bigint[];
    found   bigint[];
    missing bigint;
BEGIN
    SELECT array_agg(p.id) INTO found
    FROM (SELECT p.id FROM {schema}.jobs p WHERE p.id = ANY(p_pre) ORDER BY p.id FOR SHARE) p;
    SELECT found || array_agg(d.id) INTO found
    FROM (SELECT d.id FROM {schema}.jobs d WHERE d.id = ANY(p_dep) ORDER BY d.id
          FOR KEY SHARE) d;
    SELECT min(x) INTO missing FROM unnest(p_pre || p_dep) AS x
    WHERE found IS NULL OR NOT x = ANY(found);
    IF missing IS NOT NULL THEN
        RAISE EXCEPTION 'no job % for a dependency edge', missing
            USING ERRCODE = 'foreign_key_violation';
    END IF;
    WITH inserted AS (
        INSERT INTO {schema}.job_edges (prerequisite_id, dependent_id, policy, state, failure)
        SELECT * FROM unnest(p_pre, p_dep, p_policy, p_state, p_failure)
        ON CONFLICT DO NOTHING
        RETURNING dependent_id, state
    )
    SELECT coalesce(array_agg(i.dependent_id) FILTER (WHERE i.state IN ('open', 'blocked')), '{}'),
           count(*)::int
    INTO counted, added
    FROM inserted i;
    IF cardinality(counted) > 0 THEN
        PERFORM 1 FROM {schema}.jobs d WHERE d.id = ANY(counted) ORDER BY d.id FOR UPDATE;
        UPDATE {schema}.jobs d SET pending_deps = d.pending_deps + n.edges
        FROM (SELECT c.id, count(*)::int AS edges FROM unnest(counted) AS c(id) GROUP BY c.id) n
        WHERE d.id = n.id;
    END IF;
    SELECT coalesce(array_agg(p.id), '{}') INTO ended FROM {schema}.jobs p
    WHERE p.id = ANY(p_pre) AND p.status IN ('completed', 'dead', 'cancelled');
    IF cardinality(ended) > 0 THEN
        PERFORM {schema}.wake_dependents(ended, false, p_channel);
    END IF;
    RETURN added;
END
$fn$;

-- detach_prerequisite: remove the edge p_pre -> p_dep. If it still counted (open, blocked),
-- the dependent stops waiting for it (its count taken off its locked row) and may become
-- claimable (its queue is woken on p_channel). True if there was such an edge.
-- Locks the edge, then the dependent: resolve_dependents' order, so the two never deadlock. A
-- resolution that moved the edge first is seen here on the edge's newest version (the DELETE
-- waits for its lock and returns the state it then has), so nothing is subtracted twice.
CREATE OR REPLACE FUNCTION {schema}.detach_prerequisite(p_pre bigint, p_dep bigint, p_channel text)
RETURNS boolean LANGUAGE plpgsql AS $fn$
DECLARE
    was text;
    woken text;
BEGIN
    DELETE FROM {schema}.job_edges e WHERE e.prerequisite_id = p_pre AND e.dependent_id = p_dep
    RETURNING e.state INTO was;
    IF was IS NULL THEN
        RETURN false;
    END IF;
    IF was IN ('open', 'blocked') THEN
        UPDATE {schema}.jobs d SET pending_deps = d.pending_deps - 1 WHERE d.id = p_dep
        RETURNING CASE WHEN d.status = 'pending' AND d.pending_deps = 0 AND d.waits
                       THEN d.queue END
        INTO woken;
        IF woken IS NOT NULL THEN
            PERFORM pg_notify(p_channel, woken);
        END IF;
    END IF;
    RETURN true;
END
$fn$;
