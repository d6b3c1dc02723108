-- One flow's summary. list_flows and flow_view both read it, so they cannot disagree.
-- Outcome precedence: any node not finished -> running; else any cancelled -> failed; else any
-- dead -> completed_with_failures; else completed.
CREATE OR REPLACE FUNCTION {schema}.flow_stats(p_flow_id bigint)
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
    CROSS JOIN LATERAL (SELECT {schema}.sub_state(j.status, j.pending_deps, j.waits, j.run_at,
                                                  j.attempts) AS sub_state) s
    WHERE j.flow_id = p_flow_id
$fn$;
