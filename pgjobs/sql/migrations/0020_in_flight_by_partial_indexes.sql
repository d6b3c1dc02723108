-- 0020: one index fewer on every job written. jobs_inflight_idx (0003) held every pending and
-- running job, so each insert and each claim wrote an entry into it on top of the claim index
-- and the running indexes, which already hold most of those rows: measured, about 15% of the
-- server time of inserting a job. The in-flight rows are now found through the partial indexes
-- that hold them, one for each way of being in flight:
--   * pending with no prerequisite left: jobs_claim_idx (0001);
--   * pending behind prerequisites: jobs_waiting_children_idx, below (flow parents only);
--   * running: jobs_running_idx (0002) and jobs_lease_idx (0001).
-- Statements that read in-flight jobs spell the in-flight test as those three predicates
-- (fragments.sql, in_flight; sql/filters.py for a status filter), so the planner can combine
-- the indexes; with the CHECK jobs_pending_deps_check the three together are exactly
-- status IN ('pending', 'running').
DROP INDEX {schema}.jobs_inflight_idx;
CREATE INDEX jobs_waiting_children_idx ON {schema}.jobs (queue)
    WHERE status = 'pending' AND pending_deps > 0;
