-- enqueue: add a job from SQL (a trigger, a migration, a service in another language), in the
-- caller's transaction, as JobQueue.enqueue adds it from Python: the kind's defaults from table
-- kinds (recorded by the processes that declare it), the same checks where SQL can make them
-- (each error names the option at fault), the same row, 'added' event and wake-up of idle
-- workers (enqueue_job, as a call inside a caller's transaction makes it). The payload is
-- stored as given: the worker validates it against the kind's input type when it runs it (a
-- payload the kind refuses fails the job for good, InvalidJobInput). Returns the new job's id,
-- or the id of the job that already holds its job key (any status) or its dedup key (in
-- flight), as Python's enqueue does (no job is written then).
CREATE OR REPLACE FUNCTION {schema}.enqueue(
    kind text,
    payload jsonb,
    queue text DEFAULT NULL,
    priority integer DEFAULT NULL,
    run_at timestamptz DEFAULT NULL,
    delay interval DEFAULT NULL,
    max_attempts integer DEFAULT NULL,
    dedup_key text DEFAULT NULL,
    job_key text DEFAULT NULL,
    group_key text DEFAULT NULL,
    name text DEFAULT NULL,
    tenant text DEFAULT NULL,
    metadata jsonb DEFAULT NULL,
    events boolean DEFAULT false
) RETURNS bigint LANGUAGE plpgsql AS $fn$
#variable_conflict use_variable
DECLARE
    k      {schema}.kinds;
    result record;
    secs   float8;
BEGIN
    IF kind IS NULL OR payload IS NULL THEN
        RAISE EXCEPTION 'enqueue: kind and payload are required'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT * INTO k FROM {schema}.kinds WHERE kinds.name = kind;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'enqueue: kind % is not recorded: a worker records its kinds as it starts (or call JobQueue.record_kinds())', quote_literal(kind)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF k.names_jobs AND name IS NULL THEN
        RAISE EXCEPTION 'enqueue: name: kind % names its jobs from their input (job_name), which SQL cannot: pass name', quote_literal(kind)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF k.groups_jobs AND group_key IS NULL THEN
        RAISE EXCEPTION 'enqueue: group_key: kind % groups its jobs by their input (group_key), which SQL cannot: pass group_key', quote_literal(kind)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF queue IS NOT NULL AND (queue = '' OR octet_length(queue) > 1024) THEN
        RAISE EXCEPTION 'enqueue: queue must be a non-empty name of at most 1024 bytes'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF priority IS NOT NULL AND priority NOT BETWEEN -1000000000 AND 1000000000 THEN
        RAISE EXCEPTION 'enqueue: priority must be between -1000000000 and 1000000000, got %', priority
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF max_attempts IS NOT NULL AND max_attempts NOT BETWEEN 1 AND 1000000 THEN
        RAISE EXCEPTION 'enqueue: max_attempts must be between 1 and 1000000, got %', max_attempts
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF run_at IS NOT NULL AND delay IS NOT NULL THEN
        RAISE EXCEPTION 'enqueue: delay: give either run_at or delay, not both'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF run_at IS NOT NULL AND NOT isfinite(run_at) THEN
        RAISE EXCEPTION 'enqueue: run_at must be a finite time, got %', run_at
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    secs := extract(epoch FROM delay);
    IF secs IS NOT NULL AND (secs < 0 OR secs > 3153600000) THEN
        RAISE EXCEPTION 'enqueue: delay must be between 0 and 100 years, got %', delay
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF (name = '' OR octet_length(name) > 1024) OR (dedup_key = '' OR octet_length(dedup_key) > 1024)
       OR (job_key = '' OR octet_length(job_key) > 1024)
       OR (group_key = '' OR octet_length(group_key) > 1024)
       OR (tenant = '' OR octet_length(tenant) > 256) THEN
        RAISE EXCEPTION 'enqueue: %: must be a non-empty string of at most % bytes',
            CASE WHEN name = '' OR octet_length(name) > 1024 THEN 'name'
                 WHEN dedup_key = '' OR octet_length(dedup_key) > 1024 THEN 'dedup_key'
                 WHEN job_key = '' OR octet_length(job_key) > 1024 THEN 'job_key'
                 WHEN group_key = '' OR octet_length(group_key) > 1024 THEN 'group_key'
                 ELSE 'tenant' END,
            CASE WHEN tenant = '' OR octet_length(tenant) > 256 THEN 256 ELSE 1024 END
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    FOR attempt IN 1..3 LOOP  -- a NULL id: the key's holder finished meanwhile; again
        SELECT e.id, e.duplicate INTO result
        FROM {schema}.enqueue_job(
            coalesce(queue, k.queue), k.name, coalesce(name, k.name), payload::text,
            coalesce(priority, k.priority), run_at, secs, coalesce(max_attempts, k.max_attempts),
            k.max_deferrals, k.backoff::text, dedup_key, group_key, tenant, metadata::text,
            job_key, k.retention::text, NULL, 0, events, '{schema}_jobs', NULL, false) AS e;
        IF result.id IS NOT NULL THEN
            RETURN result.id;
        END IF;
    END LOOP;
    RAISE EXCEPTION 'enqueue: the holder of dedup key % kept finishing under this enqueue; try again', quote_literal(dedup_key)
        USING ERRCODE = 'serialization_failure';
END
$fn$;
