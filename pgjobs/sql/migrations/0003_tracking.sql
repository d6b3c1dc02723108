-- 0003: what the tracking API (pgjobs.tracking) derives, defined once in SQL.

-- Every job is either in flight (pending, running) or finished with a finished_at: counts split
-- along this line add up to the total, and each half reads its own partial index.
ALTER TABLE {schema}.jobs ADD CONSTRAINT jobs_finished_iff_terminal
    CHECK ((status IN ('completed', 'dead', 'cancelled')) = (finished_at IS NOT NULL));

-- In-flight rows of a queue, for counts and listings that must not visit finished history.
CREATE INDEX jobs_inflight_idx ON {schema}.jobs (queue, status) WHERE status IN ('pending', 'running');

-- The dashboard sub-state: derived, never stored. Mutually exclusive; waiting_children wins
-- over delayed and retry. Inlined by the planner wherever it is used.
CREATE FUNCTION {schema}.sub_state(p_status text, p_pending_deps int, p_run_at timestamptz, p_attempts int)
RETURNS text LANGUAGE sql STABLE AS $fn$
    SELECT CASE p_status
        WHEN 'pending' THEN CASE
            WHEN p_pending_deps > 0 THEN 'waiting_children'
            WHEN p_run_at > now() AND p_attempts = 0 THEN 'delayed'
            WHEN p_run_at > now() THEN 'retry'
            ELSE 'ready' END
        WHEN 'running' THEN 'active'
        WHEN 'dead' THEN 'failed'
        ELSE p_status END
$fn$;

-- One flow's summary. list_flows and flow_view both read it, so they cannot disagree.
-- Outcome precedence: any node not finished -> running; else any cancelled -> failed; else any
-- dead -> completed_with_failures; else completed.
CREATE FUNCTION {schema}.flow_stats(p_flow_id bigint)
RETURNS TABLE (
    total bigint, created_at timestamptz, finished_at timestamptz, outcome text,
    waiting_children bigint, delayed bigint, retry bigint, ready bigint, active bigint,
    failed bigint, completed bigint, cancelled bigint
) LANGUAGE sql STABLE AS $fn$
    SELECT count(*), min(j.created_at),
           CASE WHEN bool_and(j.finished_at IS NOT NULL) THEN max(j.finished_at) END,
           CASE WHEN bool_or(j.finished_at IS NULL) THEN 'running'
                WHEN bool_or(j.status = 'cancelled') THEN 'failed'
                WHEN bool_or(j.status = 'dead') THEN 'completed_with_failures'
                ELSE 'completed' END,
           count(*) FILTER (WHERE s.sub_state = 'waiting_children'),
           count(*) FILTER (WHERE s.sub_state = 'delayed'),
           count(*) FILTER (WHERE s.sub_state = 'retry'),
           count(*) FILTER (WHERE s.sub_state = 'ready'),
           count(*) FILTER (WHERE s.sub_state = 'active'),
           count(*) FILTER (WHERE s.sub_state = 'failed'),
           count(*) FILTER (WHERE s.sub_state = 'completed'),
           count(*) FILTER (WHERE s.sub_state = 'cancelled')
    FROM {schema}.jobs j
    CROSS JOIN LATERAL (SELECT {schema}.sub_state(j.status, j.pending_deps, j.run_at, j.attempts)
                        AS sub_state) s
    WHERE j.flow_id = p_flow_id
$fn$;
