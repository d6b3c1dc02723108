-- Waking waiting workers and event readers without a NOTIFY from every write.
--
-- Why: a transaction that has sent a NOTIFY holds one database-wide lock from its pre-commit to
-- its end (PostgreSQL's async.c, PreCommit_Notify: "serialize writers by acquiring a special
-- lock that we hold till after commit"), so notifying commits happen one at a time, WAL flush
-- included: ten connections enqueueing durably flushed one after another (measured in
-- plpgsql: 2,140 enqueues/s notifying every time against 4,928 with the check below; 7,251
-- against 9,704 with synchronous_commit off). A write in a transaction of its own therefore
-- notifies a queue's channel only while someone waits on it: a worker about to wait registers
-- in idle_workers (idle_state below; with free = 0 when it takes no hand-offs) and its next
-- claim withdraws the registration; an event stream registers in event_readers while it is
-- open (register_event_reader).
--
-- The race, closed by an advisory lock per queue (lock_queues_for_waking): such a writer holds
-- it shared from its look at the registrations to its commit, and whoever registers takes it
-- exclusive first. A writer that locked first has committed by the time the registered one looks for
-- what is there (a later statement, so a fresh snapshot: a worker's look for due jobs is in
-- its registering transaction, a reader's first read after it), and finds the writer's rows; a
-- writer that locks after the registration committed sees it (its look is a statement after
-- its lock) and notifies. A writer in a caller's transaction takes no lock (a registration
-- would wait for that transaction) and always notifies, as every write did before.

-- lock_queues_for_waking: the wake locks of p_queues (first key: the schema's, second: the
-- queue's hashtext; two queues may share one, which only makes them wait for each other),
-- exclusive (one registering) or shared (a writer), held until the transaction ends; taken
-- in key order, so that writers and registrations of several queues never wait for each other
-- in a cycle. One statement: in PL/pgSQL on this VM every statement costs tens of
-- microseconds, which a writer pays on every write.
CREATE OR REPLACE FUNCTION {schema}.lock_queues_for_waking(p_queues text[], p_exclusive bool)
RETURNS void LANGUAGE plpgsql AS $fn$
BEGIN
    IF p_exclusive THEN
        PERFORM pg_advisory_xact_lock(hashtext('{schema}.wake'), k)
        FROM (SELECT DISTINCT hashtext(q) AS k FROM unnest(p_queues) AS q ORDER BY 1) AS keys;
    ELSE
        PERFORM pg_advisory_xact_lock_shared(hashtext('{schema}.wake'), k)
        FROM (SELECT DISTINCT hashtext(q) AS k FROM unnest(p_queues) AS q ORDER BY 1) AS keys;
    END IF;
END
$fn$;

-- wake: notify channel p_channel of each of p_queues (jobs made claimable there) on which a
-- worker waits, and the event channel of each of p_event_queues (events written there) that
-- a reader follows; every one of them when p_own is false (the writes are part of a caller's
-- transaction). Returns how many notifications it sent. Written for the usual case of one
-- queue: a lock taken as a plain expression and one look per queue (a first version, with a
-- query per step, cost six times the server time: 101 against 17 µs above a bare SELECT).
CREATE OR REPLACE FUNCTION {schema}.wake(
    p_queues text[], p_event_queues text[], p_channel text, p_own bool
) RETURNS int LANGUAGE plpgsql AS $fn$
DECLARE
    queues text[] := p_queues || p_event_queues;
    q      text;
    sent   int := 0;
BEGIN
    IF p_own AND cardinality(queues) > 0 THEN
        IF queues <@ queues[1:1] THEN  -- one queue
            PERFORM pg_advisory_xact_lock_shared(hashtext('{schema}.wake'), hashtext(queues[1]));
        ELSE
            PERFORM {schema}.lock_queues_for_waking(queues, false);
        END IF;
    END IF;
    -- looks after the lock: each sees every registration committed before it
    FOREACH q IN ARRAY coalesce(p_queues, '{}') LOOP
        IF NOT p_own OR EXISTS (SELECT FROM {schema}.idle_workers w
                                WHERE q = ANY(w.queues) AND w.expires_at > now()) THEN
            PERFORM pg_notify(p_channel, q);
            sent := sent + 1;
        END IF;
    END LOOP;
    FOREACH q IN ARRAY coalesce(p_event_queues, '{}') LOOP
        IF NOT p_own OR EXISTS (SELECT FROM {schema}.event_readers r
                                WHERE q = ANY(r.queues) AND r.expires_at > now()) THEN
            PERFORM pg_notify('{schema}_events', q);
            sent := sent + 1;
        END IF;
    END LOOP;
    RETURN sent;
END
$fn$;

-- register_event_reader: reader p_reader follows the events of p_queues for p_ttl seconds
-- (JobQueue.events renews it while the stream is open). Registrations that ran out go.
CREATE OR REPLACE FUNCTION {schema}.register_event_reader(
    p_reader uuid, p_queues text[], p_ttl float8
) RETURNS void LANGUAGE plpgsql AS $fn$
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);
    PERFORM {schema}.lock_queues_for_waking(p_queues, true);
    DELETE FROM {schema}.event_readers r WHERE r.expires_at < now() AND r.reader <> p_reader;
    INSERT INTO {schema}.event_readers AS r (reader, queues, expires_at)
    VALUES (p_reader, p_queues, now() + make_interval(secs => p_ttl))
    ON CONFLICT (reader) DO UPDATE SET queues = excluded.queues, expires_at = excluded.expires_at;
END
$fn$;

-- idle_state: for a worker that claimed less than it asked (queues p_queues, kinds p_kinds):
-- seconds (by the database clock) until it is worth claiming again, and whether any job of its
-- queues and kinds is still pending or running (a running one may come back through retry or
-- rescue; a dependent still waiting on its prerequisites is not counted: it runs only once
-- they move). Paused queues count as never due (resume sends a notification); a rate-limited
-- queue is due when its window opens; a queue at its concurrency cap is due when a job of it
-- finishes (finish_jobs notifies), re-checked at the poll interval.
--
-- With p_rate_limit (the worker's own rate limit, claim_jobs.sql), a queue whose shared worker
-- window has started that many jobs is due when the window ends.
--
-- With p_worker, the worker also registers as waiting (woken by the writes above) for p_ttl
-- seconds, offering p_free slots for hand-offs (hand_offs.sql; 0: none) with a lease of
-- p_lease seconds on its channel p_channel; committed without waiting for the WAL flush (the
-- table is unlogged anyway). The look for due jobs comes after the registration, under the
-- exclusive wake locks: a job whose writer did not see the registration is found by it.
DROP FUNCTION IF EXISTS {schema}.idle_state(text[], text[], uuid, int, float8, float8, text);
CREATE OR REPLACE FUNCTION {schema}.idle_state(
    p_queues text[], p_kinds text[], p_worker uuid, p_free int, p_ttl float8, p_lease float8,
    p_channel text, p_rate_limit int DEFAULT NULL,
    OUT until_due float8, OUT capped bool, OUT busy bool, OUT registered bool
) LANGUAGE plpgsql AS $fn$
BEGIN
    registered := false;
    IF p_worker IS NOT NULL THEN
        PERFORM set_config('synchronous_commit', 'off', true);
        PERFORM {schema}.lock_queues_for_waking(p_queues, true);
        INSERT INTO {schema}.idle_workers (worker, queues, kinds, free, lease, channel,
                                           expires_at)
        VALUES (p_worker, p_queues, p_kinds, p_free, p_lease, p_channel,
                now() + make_interval(secs => p_ttl))
        ON CONFLICT (worker) DO NOTHING;  -- a registration its last claim failed to withdraw
        registered := FOUND;
    END IF;
    WITH settings AS (
        SELECT q.queue, qs.paused, qs.limited_until, qs.concurrency, qs.group_concurrency,
               qs.grouped,
               CASE WHEN qs.rate_limit IS NOT NULL AND qs.window_start IS NOT NULL
                         AND qs.window_count >= qs.rate_limit
                         AND now() < qs.window_start + make_interval(secs => qs.rate_period)
                    THEN qs.window_start + make_interval(secs => qs.rate_period) END
                   AS window_opens,
               CASE WHEN p_rate_limit IS NOT NULL THEN
                   (SELECT ww.window_end FROM {schema}.worker_windows ww
                    WHERE ww.queue = q.queue AND ww.window_count >= p_rate_limit
                      AND now() < ww.window_end) END AS worker_window_opens
        FROM unnest(p_queues) AS q(queue)
        LEFT JOIN {schema}.queue_settings qs ON qs.queue = q.queue
    ),
    due AS (
        SELECT greatest(
                   (SELECT min(j.run_at) FROM {schema}.jobs j
                    WHERE j.status = 'pending' AND (j.pending_deps = 0 OR NOT j.waits)
                      AND j.queue = s.queue
                      AND j.kind = ANY(p_kinds)),
                   s.limited_until, s.window_opens, s.worker_window_opens) AS at,
               -- a grouped queue's ready jobs may all be in paused, busy or limited groups
               s.concurrency IS NOT NULL OR s.group_concurrency IS NOT NULL
               OR coalesce(s.grouped, false) AS is_capped
        FROM settings s
        WHERE NOT coalesce(s.paused, false)
    )
    SELECT (SELECT extract(epoch FROM min(d.at) - now())::float8 FROM due d),
           (SELECT bool_or(d.is_capped) FROM due d WHERE d.at <= now()),
           EXISTS (SELECT FROM {schema}.jobs j
                   WHERE (j.status = 'running'
                          OR (j.status = 'pending' AND (j.pending_deps = 0 OR NOT j.waits)))
                     AND j.queue = ANY(p_queues) AND j.kind = ANY(p_kinds))
    INTO until_due, capped, busy;
END
$fn$;
