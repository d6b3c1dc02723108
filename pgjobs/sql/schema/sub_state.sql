-- The dashboard sub-state: derived, never stored. Mutually exclusive; waiting_children (held
-- back by counted prerequisites: pending_deps > 0 and the job waits for them) wins over
-- delayed and retry. Inlined by the planner wherever it is used (tracking.sql, filters).
DROP FUNCTION IF EXISTS {schema}.sub_state(text, int, timestamptz, int);
CREATE OR REPLACE FUNCTION {schema}.sub_state(
    p_status text, p_pending_deps int, p_waits boolean, p_run_at timestamptz, p_attempts int
) RETURNS text LANGUAGE sql STABLE AS $fn$
    SELECT CASE p_status
        WHEN 'pending' THEN CASE
            WHEN p_pending_deps > 0 AND p_waits THEN 'waiting_children'
            WHEN p_run_at > now() AND p_attempts = 0 THEN 'delayed'
            WHEN p_run_at > now() THEN 'retry'
            ELSE 'ready' END
        WHEN 'running' THEN 'active'
        WHEN 'dead' THEN 'failed'
        ELSE p_status END
$fn$;
