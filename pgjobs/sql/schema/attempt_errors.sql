-- with_attempt_error: a job's `errors` (its failed attempts' error records, oldest first) with
-- `error` appended, keeping the last 20 (a job retried for ever does not grow without bound).
-- NULL `error` leaves them as they are. Called wherever an attempt's failure is written
-- (finish_jobs, rescue_stalled_jobs), in the same UPDATE as last_error.
CREATE OR REPLACE FUNCTION {schema}.with_attempt_error(errors jsonb, error jsonb)
RETURNS jsonb LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $fn$
    SELECT CASE WHEN error IS NULL THEN errors
                ELSE jsonb_path_query_array(coalesce(errors, '[]') || jsonb_build_array(error),
                                            'lax $[last - 19 to last]') END
$fn$;
