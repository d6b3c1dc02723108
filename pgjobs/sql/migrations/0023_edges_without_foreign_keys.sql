-- 0023: job_edges keeps its jobs' ids without foreign keys. Each edge written checked both of
-- its jobs with a row lock (twenty checks for a flow of a parent and ten children, a sixth of
-- the server time of submitting it), and each job deleted ran two cascading deletes. The
-- same guarantees now come from sql/schema/job_edges_integrity.sql: a statement that deletes
-- jobs deletes their edges, and the one path that adds edges to jobs it did not write itself
-- (attach_prerequisites) locks those jobs and refuses ids with no job.
ALTER TABLE {schema}.job_edges
    DROP CONSTRAINT IF EXISTS job_edges_prerequisite_id_fkey,
    DROP CONSTRAINT IF EXISTS job_edges_dependent_id_fkey;
