-- 0011: repair the counts of open prerequisites that concurrent finishes left too high.
-- Until this release a dependent's pending_deps was recounted in each finishing statement's
-- own snapshot: two prerequisites finishing in overlapping transactions could both write 1,
-- leaving the dependent waiting for ever (the count is now kept by decrements, see
-- sql/schema/resolve_dependents.sql). Every job with incoming edges is locked first, then
-- recounted by the next statement, whose fresh snapshot sees every finish committed before the
-- lock; a finish still in flight decrements the repaired row after this commits.
SELECT 1 FROM {schema}.jobs d
WHERE EXISTS (SELECT FROM {schema}.job_edges e WHERE e.dependent_id = d.id) OR d.pending_deps > 0
ORDER BY d.id
FOR UPDATE;

UPDATE {schema}.jobs d
SET pending_deps = (SELECT count(*) FROM {schema}.job_edges e
                    WHERE e.dependent_id = d.id AND e.state IN ('open', 'blocked'))
WHERE (EXISTS (SELECT FROM {schema}.job_edges e WHERE e.dependent_id = d.id) OR d.pending_deps > 0)
  AND d.pending_deps IS DISTINCT FROM (SELECT count(*) FROM {schema}.job_edges e
                                       WHERE e.dependent_id = d.id AND e.state IN ('open', 'blocked'));
