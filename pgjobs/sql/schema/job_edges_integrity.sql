-- The integrity of job_edges, which names its jobs by id without foreign keys.
--
-- Every edge names two existing jobs, but for a kept satisfied edge (below), whose dependent
-- exists and whose prerequisite is gone: edges are written only by statements that wrote both
-- jobs in the same transaction (a flow, a flow's rerun) or by attach_prerequisites, which
-- locks the jobs it is given and refuses an id with no job; a job deleted takes its edges
-- with it, in the deleting statement (the trigger below, as ON DELETE CASCADE did). A delete
-- racing an attach: the attach's locks make the delete wait for its commit, and the delete's
-- trigger, a new statement with a fresh snapshot, then sees the new edge and deletes it too;
-- a delete that committed first leaves no row to lock, and the attach is refused.
--
-- A completed prerequisite deleted (a retention rule, a clean, the GC) leaves its satisfied
-- edges in place, each holding what its dependent reads of it (removed_prerequisite: kind,
-- name, queue, job key, output; prerequisite_results reads it), as BullMQ keeps a removed
-- child's value in its parent's processed set. The copy is written here, from the deleted
-- row, so that finishing a job costs nothing for it. Such an edge counts nothing (satisfied)
-- and leaves with its dependent.

-- drop_deleted_jobs_edges: after a statement that deleted jobs, the edges of those jobs, by
-- either end (each through its index: the key for the prerequisite, job_edges_dependent_idx),
-- but the satisfied edges of completed prerequisites, kept with their copy.
CREATE OR REPLACE FUNCTION {schema}.drop_deleted_jobs_edges() RETURNS trigger
LANGUAGE plpgsql AS $fn$
BEGIN
    UPDATE {schema}.job_edges e
    SET removed_prerequisite = jsonb_build_object('kind', d.kind, 'name', d.name,
                                                  'queue', d.queue, 'job_key', d.job_key,
                                                  'output', d.output)
    FROM deleted_jobs d
    WHERE e.prerequisite_id = d.id AND d.status = 'completed' AND e.state = 'satisfied';
    DELETE FROM {schema}.job_edges e USING deleted_jobs d
    WHERE e.prerequisite_id = d.id AND e.removed_prerequisite IS NULL;
    DELETE FROM {schema}.job_edges e USING deleted_jobs d WHERE e.dependent_id = d.id;
    RETURN NULL;
END
$fn$;

-- truncate_job_edges: TRUNCATE of jobs empties job_edges too (a foreign key made TRUNCATE of
-- jobs alone an error; CASCADE emptied both). A DELETE, not a TRUNCATE: a TRUNCATE that names
-- both tables has emptied job_edges already, and may not be followed by another of it.
CREATE OR REPLACE FUNCTION {schema}.truncate_job_edges() RETURNS trigger
LANGUAGE plpgsql AS $fn$
BEGIN
    DELETE FROM {schema}.job_edges;
    RETURN NULL;
END
$fn$;

CREATE OR REPLACE TRIGGER jobs_drop_edges AFTER DELETE ON {schema}.jobs
    REFERENCING OLD TABLE AS deleted_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION {schema}.drop_deleted_jobs_edges();
CREATE OR REPLACE TRIGGER jobs_truncate_edges AFTER TRUNCATE ON {schema}.jobs
    FOR EACH STATEMENT EXECUTE FUNCTION {schema}.truncate_job_edges();
