-- enqueue_job: write one job (queries.sql, enqueue_one). Parameters: the columns in the order of
-- enqueue.py's row_args; the queue's notification channel; the transaction's
-- synchronous_commit ('off' for Durability.ASYNC; NULL keeps the server's), set by this
-- function; and p_own, whether this call is a transaction of its own (false inside a caller's
-- transaction). Returns the new job's id, or the id of the job that holds its job key (any
-- status) or its dedup key (in flight) with duplicate true; a NULL id when that holder
-- finished between the conflict and the read (the caller tries again).
--
-- A function rather than one statement with CTEs: each step runs only when it applies (the
-- hand-off only for a job that could start at once, the holder's read only after a conflict,
-- the 'added' event only for a job that records events), which measured a quarter less server
-- time per enqueue than the statement that had every branch in its plan.
--
-- In its own transaction, a job that could start at once (due now, no prerequisites, a
-- payload that fits in a notification) and a worker registered idle for its queue and kind
-- whose queue lets it start: the job is written running, leased to that worker as a claim
-- would lease it (the worker's slot taken and the job's token recorded in its registration),
-- its 'added' then 'active' events are written when it records events, and its row is sent to
-- that worker alone, on the worker's channel (hand_offs.sql says how the worker collects what
-- it missed). Otherwise the job is written pending and its 'added' event written when it
-- records events; its queue is notified when a worker waits on it, and its event readers when
-- one follows it (wake.sql; both always, in a caller's transaction). The hand-off is as few
-- statements as its guarantees allow: after an idle pause each statement runs cold, and
-- folding the slot's lookup, lock and update into one and writing the hand-off out here took
-- about a tenth off the facade's idle latency.
--
-- Concurrency (READ COMMITTED; each statement of a function sees a fresh snapshot). A look
-- for a free slot decides only whether to try: a slot freed after it is one freed after the
-- enqueue (the job is written pending, and the wake below notifies its worker). One
-- UPDATE finds a registration with a free slot, locks it SKIP LOCKED and takes the slot: a
-- registration another enqueue holds is skipped (an enqueue never waits for a slot; with none
-- left it writes its job pending), and one another enqueue updated and committed after this
-- statement's snapshot is read again as of that commit before it is locked (READ COMMITTED's
-- recheck of an updated row), so a slot taken meanwhile is seen as taken: two enqueues never
-- take one slot. A claim withdrawing the registration waits for this lock
-- (withdraw_idle_worker). A pause, cap or job ahead that commits after the slot's statement
-- read the queue is the same race as a claim made just before it. A key conflict writes
-- nothing and gives its slot back in the same transaction, so it takes none. The wake lock is
-- taken after the insert, so that an insert waiting on another transaction's key never holds
-- it.
CREATE OR REPLACE FUNCTION {schema}.enqueue_job(
    p_queue text, p_kind text, p_name text, p_payload text, p_priority int, p_run_at timestamptz,
    p_delay float8, p_max_attempts int, p_max_deferrals int, p_backoff text, p_dedup_key text,
    p_group_key text, p_tenant text, p_metadata text, p_job_key text, p_retention text,
    p_flow_id bigint, p_pending_deps int, p_record_events bool, p_channel text, p_commit text,
    p_own bool, OUT id bigint, OUT duplicate bool
) LANGUAGE plpgsql AS $fn$
DECLARE
    due      timestamptz := coalesce(p_run_at, now() + make_interval(secs => coalesce(p_delay, 0)));
    token    uuid;
    slot     record;
    job      {schema}.jobs;
BEGIN
    duplicate := false;
    IF p_commit IS NOT NULL THEN
        PERFORM set_config('synchronous_commit', p_commit, true);
    END IF;
    IF p_own AND p_pending_deps = 0 AND due <= now() AND p_group_key IS NULL  -- no group's turn
       AND octet_length(p_payload) + coalesce(octet_length(p_metadata), 0)
           + octet_length(p_name) + coalesce(octet_length(p_retention), 0)
           + coalesce(octet_length(p_tenant), 0) < 4000  -- NOTIFY's payload limit is 8,000
    THEN
        -- a look for a free slot first (a query of its own: the checks above stay a plain
        -- expression): the slot's statement checks the queue (its settings, a job waiting
        -- ahead) before it reads a registration, which cost every enqueue to a queue with no
        -- idle worker (all of them under load) a quarter of its server time
        IF EXISTS (SELECT FROM {schema}.idle_workers c
                   WHERE c.free > 0 AND p_queue = ANY(c.queues) AND p_kind = ANY(c.kinds))
        THEN
            token := gen_random_uuid();  -- the lease's, recorded with the slot it takes
            UPDATE {schema}.idle_workers w SET free = w.free - 1, handed = w.handed || token
            WHERE w.worker = (
                SELECT c.worker FROM {schema}.idle_workers c
                WHERE c.free > 0 AND c.expires_at > now() AND p_queue = ANY(c.queues)
                  AND p_kind = ANY(c.kinds)
                  AND NOT EXISTS (SELECT FROM {schema}.queue_settings qs
                                  WHERE qs.queue = p_queue
                                    AND (qs.paused OR qs.limited_until > now()
                                         OR qs.concurrency IS NOT NULL OR qs.grouped
                                         OR qs.rate_limit IS NOT NULL))
                  AND NOT EXISTS (SELECT FROM {schema}.jobs a
                                  WHERE a.queue = p_queue AND a.status = 'pending'
                                    AND a.history_day = 'infinity'
                                    AND (a.pending_deps = 0 OR NOT a.waits)
                                    AND a.priority >= p_priority
                                    AND a.run_at <= now())
                LIMIT 1
                FOR UPDATE SKIP LOCKED)
            RETURNING w.worker, w.lease, w.channel INTO slot;
            IF slot.worker IS NOT NULL THEN
                INSERT INTO {schema}.jobs AS j (
                    queue, kind, name, payload, priority, run_at, max_attempts, max_deferrals,
                    backoff, dedup_key, group_key, tenant, metadata, job_key, retention, flow_id,
                    pending_deps, record_events, status, attempts, lock_token, heartbeat_at,
                    locked_until, started_at, worker)
                VALUES (p_queue, p_kind, p_name, p_payload::jsonb, p_priority, due,
                        p_max_attempts, p_max_deferrals, p_backoff::jsonb, p_dedup_key,
                        p_group_key, p_tenant, p_metadata::jsonb, p_job_key, p_retention::jsonb,
                        p_flow_id, p_pending_deps, p_record_events, 'running', 1,
                        token, now(), now() + make_interval(secs => slot.lease),
                        now(), (SELECT k.name FROM {schema}.workers k WHERE k.id = slot.worker))
                ON CONFLICT DO NOTHING
                RETURNING * INTO job;
                IF job.id IS NULL THEN  -- a key conflict: the slot goes back
                    UPDATE {schema}.idle_workers w
                    SET free = w.free + 1, handed = array_remove(w.handed, token)
                    WHERE w.worker = slot.worker;
                    SELECT h.id, true INTO id, duplicate
                    FROM {schema}.key_holder(p_queue, p_tenant, p_job_key, p_dedup_key) AS h;
                    RETURN;
                END IF;
                IF p_record_events THEN  -- one statement, its rows in order: 'added', 'active'
                    INSERT INTO {schema}.job_events (queue, job_id, job_key, tenant, event,
                                                     prev, data, added)
                    VALUES (p_queue, NULL, NULL, p_tenant, 'added', NULL, NULL,
                            ARRAY[ROW(job.id, p_job_key, p_name, p_pending_deps, due,
                                      p_priority)::{schema}.added_job]),
                           (p_queue, job.id, p_job_key, p_tenant, 'active', 'pending',
                            jsonb_build_object('attempt', 1), NULL);
                    PERFORM pg_advisory_xact_lock_shared(hashtext('{schema}.wake'),
                                                         hashtext(p_queue));
                END IF;
                -- its readers' wake (wake.sql's, written out) and the row to the worker
                PERFORM CASE WHEN p_record_events
                                   AND EXISTS (SELECT FROM {schema}.event_readers r
                                               WHERE p_queue = ANY(r.queues)
                                                 AND r.expires_at > now())
                              THEN pg_notify('{schema}_events', p_queue) END,
                        pg_notify(slot.channel, json_build_object(
                            'id', job.id, 'queue', job.queue, 'kind', job.kind, 'name', job.name,
                            'payload', job.payload::text, 'priority', job.priority,
                            'run_at', job.run_at, 'attempts', job.attempts,
                            'max_attempts', job.max_attempts, 'deferrals', job.deferrals,
                            'max_deferrals', job.max_deferrals, 'backoff', job.backoff::text,
                            'lock_token', job.lock_token, 'tenant', job.tenant,
                            'metadata', job.metadata::text, 'flow_id', job.flow_id,
                            'progress', job.progress::text, 'job_key', job.job_key,
                            'created_at', job.created_at, 'schedule', job.schedule)::text);
                id := job.id;
                RETURN;
            END IF;
        END IF;
    END IF;
    INSERT INTO {schema}.jobs AS j (
        queue, kind, name, payload, priority, run_at, max_attempts, max_deferrals, backoff,
        dedup_key, group_key, tenant, metadata, job_key, retention, flow_id, pending_deps,
        record_events)
    VALUES (p_queue, p_kind, p_name, p_payload::jsonb, p_priority, due, p_max_attempts,
            p_max_deferrals, p_backoff::jsonb, p_dedup_key, p_group_key, p_tenant,
            p_metadata::jsonb, p_job_key, p_retention::jsonb, p_flow_id, p_pending_deps,
            p_record_events)
    ON CONFLICT DO NOTHING
    RETURNING j.id INTO id;
    IF id IS NULL THEN
        SELECT h.id, true INTO id, duplicate
        FROM {schema}.key_holder(p_queue, p_tenant, p_job_key, p_dedup_key) AS h;
        RETURN;
    END IF;
    IF p_record_events THEN
        INSERT INTO {schema}.job_events (queue, tenant, event, added)
        VALUES (p_queue, p_tenant, 'added',
                ARRAY[ROW(id, p_job_key, p_name, p_pending_deps, due, p_priority)
                      ::{schema}.added_job]);
    END IF;
    -- wake.sql's wake for one queue, written out: this is every enqueue's path (the two
    -- looks as SQL helper functions measured 100 µs more server time per enqueue)
    IF NOT p_own THEN
        PERFORM pg_notify(p_channel, p_queue);
        IF p_record_events THEN
            PERFORM pg_notify('{schema}_events', p_queue);
        END IF;
        RETURN;
    END IF;
    PERFORM pg_advisory_xact_lock_shared(hashtext('{schema}.wake'), hashtext(p_queue));
    IF EXISTS (SELECT FROM {schema}.idle_workers w
               WHERE p_queue = ANY(w.queues) AND w.expires_at > now()) THEN
        PERFORM pg_notify(p_channel, p_queue);
    END IF;
    IF p_record_events AND EXISTS (SELECT FROM {schema}.event_readers r
                                   WHERE p_queue = ANY(r.queues) AND r.expires_at > now()) THEN
        PERFORM pg_notify('{schema}_events', p_queue);
    END IF;
END
$fn$;

-- key_holder: the job holding job key p_job_key (any status) or dedup key p_dedup_key (in
-- flight) in queue p_queue for tenant p_tenant, the job key's first; none when the holder of a
-- dedup key finished meanwhile.
CREATE OR REPLACE FUNCTION {schema}.key_holder(
    p_queue text, p_tenant text, p_job_key text, p_dedup_key text
) RETURNS TABLE (id bigint) LANGUAGE sql STABLE AS $fn$
    SELECT j.id FROM {schema}.jobs j
    WHERE j.queue = p_queue AND coalesce(j.tenant, '') = coalesce(p_tenant, '')
      AND (j.job_key = p_job_key
           OR (j.dedup_key = p_dedup_key AND j.status IN ('pending', 'running')))
    ORDER BY j.job_key = p_job_key DESC NULLS LAST
    LIMIT 1
$fn$;

-- enqueue_kept_jobs: enqueue the jobs kept for dedup keys (table dedup_next)
-- whose holders p_ids the caller has just written finished (finish_jobs.sql), in the caller's
-- transaction: each is written as enqueue_job writes a job in a caller's transaction (pending,
-- its 'added' event when it records events, its queue notified), its delay counted from now,
-- and holds its key in flight in turn. A kept row is deleted as it is enqueued; one whose job
-- key another job has taken meanwhile is dropped. The holders' rows are locked by the caller,
-- which is what keep_next_job waits for: a job kept before that lock is enqueued here, one
-- arriving after it finds its holder finished. Returns how many jobs were written.
CREATE OR REPLACE FUNCTION {schema}.enqueue_kept_jobs(p_ids bigint[], p_channel text)
RETURNS int LANGUAGE plpgsql AS $fn$
DECLARE
    kept    record;
    written int := 0;
    result  record;
BEGIN
    FOR kept IN
        DELETE FROM {schema}.dedup_next d WHERE d.holder_id = ANY(p_ids) RETURNING d.*
    LOOP
        SELECT e.id, e.duplicate INTO result
        FROM {schema}.enqueue_job(
            kept.queue, kept.kind, kept.name, kept.payload::text, kept.priority, kept.run_at,
            kept.delay, kept.max_attempts, kept.max_deferrals, kept.backoff::text, kept.key,
            kept.group_key, kept.job_tenant, kept.metadata::text, kept.job_key,
            kept.retention::text, NULL, 0, kept.record_events, p_channel, NULL, false) AS e;
        IF NOT result.duplicate THEN
            written := written + 1;
        END IF;
    END LOOP;
    RETURN written;
END
$fn$;
