-- Dependents: the one place where a prerequisite's end reaches the jobs that wait for it.
--
-- A dependent's pending_deps counts its incoming edges in state open or blocked. It is kept by
-- decrements, never by recounting: every statement that moves an edge out of those two states
-- subtracts what it moved, from the dependent's row as it stands when the statement has locked
-- it. Why that is exact under READ COMMITTED, whatever commits in between:
--   * an edge leaves the counted states once. The UPDATE that moves it locks the edge row; a
--     concurrent mover waits for that lock, then re-checks the state on the row's newest
--     version (PostgreSQL's re-evaluation of an UPDATE's WHERE after a lock wait) and skips it;
--   * "pending_deps - n" is computed on the dependent's newest row version, after the lock
--     wait, not on the statement's snapshot: two decrements by overlapping transactions
--     compose. (A recount, count(*) over the edges, would read the snapshot taken before the
--     other transaction committed, and two siblings finishing together would both write 1.)
-- Anything that recounts (the re-drive of a whole flow) locks the dependents in one statement
-- and counts in the next, whose fresh snapshot sees every commit that preceded the lock.

-- resolve_dependents: resolve the open edges leaving prerequisites that just ended (or are
-- about to be deleted, with p_removed). Completed releases an edge; a failure applies its
-- policy (block keeps counting until the prerequisite is re-driven or removed; cascade fails a
-- pending dependent, transitively; ignore and continue release it, with the failure recorded;
-- continue also releases the dependent's other edges; cascade_deferred, see below). Returns
-- the dependents that became claimable. Callers go through wake_dependents, which also wakes
-- their queues.
--
-- cascade_deferred (BullMQ's failParentOnFailure): a prerequisite that died makes a pending
-- dependent claimable at once (its other counted edges released, as under continue; its due
-- time brought to now) with a deferred failure: its last_error is the DependencyFailed record
-- marked "deferred": true, which the next claim records as dead without running the handler
-- (runner.py), as for a stall past the stall budget (rescue_stalled_jobs.sql). Its own
-- dependents are resolved when that failure is written (finish_jobs). A cancelled or removed
-- prerequisite cancels the dependent at once, as under cascade. The deferral is decided on the
-- dependent's locked row: one cancelled or removed meanwhile is left so. A dependent running
-- when its prerequisite dies is left to its handler, as under cascade (the edge reads failed).
-- Which dependents have their other edges released is read before they are locked (edges are
-- locked before dependents, the one lock order): one whose handler put it back to wait for
-- prerequisites in that instant keeps waiting for its other edges, then fails unrun.
--
-- A dependent that a cascade made dead under retention {"count": 0} for dead goes at once, as
-- finish_jobs removes a job that fails under that rule (drop_dead_prerequisites): once every
-- round is resolved, so that its own dependents were resolved on its row.
CREATE OR REPLACE FUNCTION {schema}.resolve_dependents(p_ids bigint[], p_removed boolean DEFAULT false)
RETURNS SETOF bigint LANGUAGE plpgsql AS $fn$
DECLARE
    frontier  bigint[] := p_ids;
    removing  boolean  := p_removed;
    pre       bigint[];
    dep       bigint[];
    pol       text[];
    outcome   text[];
    continues bigint[];
    deferring bigint[];
    released  bigint[];
    cascaded  bigint[];
    all_cascaded bigint[] := '{}';
BEGIN
    WHILE cardinality(frontier) > 0 LOOP
        -- The counted edges leaving this round's prerequisites, locked in a stable order.
        SELECT coalesce(array_agg(x.prerequisite_id), '{}'), coalesce(array_agg(x.dependent_id), '{}'),
               coalesce(array_agg(x.policy), '{}'), coalesce(array_agg(x.outcome), '{}')
        INTO pre, dep, pol, outcome
        FROM (
            SELECT e.prerequisite_id, e.dependent_id, e.policy,
                   CASE WHEN j.status = 'completed' THEN 'completed'
                        WHEN removing THEN 'removed' ELSE j.status END AS outcome
            FROM {schema}.job_edges e JOIN {schema}.jobs j ON j.id = e.prerequisite_id
            WHERE e.prerequisite_id = ANY(frontier) AND e.state IN ('open', 'blocked')
              AND (removing OR j.status IN ('completed', 'dead', 'cancelled'))
            ORDER BY e.dependent_id, e.prerequisite_id
            FOR UPDATE OF e
        ) x;
        EXIT WHEN cardinality(pre) = 0;
        -- Dependents that a failure under continue lets run now, and the pending ones that a
        -- death under cascade_deferred hands to their worker to fail.
        SELECT coalesce(array_agg(DISTINCT r.dependent_id)
                            FILTER (WHERE r.policy = 'continue'), '{}'),
               coalesce(array_agg(DISTINCT r.dependent_id)
                            FILTER (WHERE r.policy = 'cascade_deferred' AND r.outcome = 'dead'
                                      AND d.status = 'pending'), '{}')
        INTO continues, deferring
        FROM unnest(dep, pol, outcome) AS r(dependent_id, policy, outcome)
        LEFT JOIN {schema}.jobs d ON d.id = r.dependent_id
        WHERE r.outcome <> 'completed';

        -- Move the edges, and list the dependent of every edge that stopped counting (once per
        -- edge). Block keeps counting while its prerequisite is failed (a re-drive or a removal
        -- releases it); every other ending releases the edge, keeping the failure readable; a
        -- continue or deferring dependent's other counted edges are released too.
        WITH moved AS (
            UPDATE {schema}.job_edges e
            SET state = CASE
                    WHEN r.outcome = 'completed' THEN 'satisfied'
                    WHEN r.policy = 'block' AND r.outcome <> 'removed'
                         AND NOT (r.dependent_id = ANY(continues || deferring)) THEN 'blocked'
                    WHEN r.policy = 'block' THEN 'released'
                    WHEN r.policy IN ('cascade', 'cascade_deferred') THEN 'failed'
                    ELSE 'ignored' END,
                failure = CASE WHEN r.outcome = 'completed' THEN NULL ELSE j.last_error END
            FROM unnest(pre, dep, pol, outcome) AS r(prerequisite_id, dependent_id, policy, outcome)
            JOIN {schema}.jobs j ON j.id = r.prerequisite_id
            WHERE e.prerequisite_id = r.prerequisite_id AND e.dependent_id = r.dependent_id
            RETURNING e.dependent_id, e.state
        ),
        continued AS (
            UPDATE {schema}.job_edges e SET state = 'released'
            WHERE e.dependent_id = ANY(continues || deferring) AND e.state IN ('open', 'blocked')
              AND NOT (e.prerequisite_id = ANY(pre))
            RETURNING e.dependent_id
        )
        SELECT coalesce(array_agg(m.dependent_id), '{}') INTO released
        FROM (SELECT dependent_id FROM moved WHERE state <> 'blocked'
              UNION ALL SELECT dependent_id FROM continued) m;

        -- Lock the dependents in id order (the one order every multi-row writer of jobs uses),
        -- then take what stopped counting off their newest row versions. In the same statement
        -- (one 'released' event) a dependent still pending on its locked row is given the
        -- deferred failure of its first prerequisite that died under cascade_deferred (a
        -- deferred failure it already carries is kept), due now. The error names the
        -- prerequisite by id, queue and job key, as cascade's does.
        PERFORM 1 FROM {schema}.jobs d WHERE d.id = ANY(released) ORDER BY d.id FOR UPDATE;
        UPDATE {schema}.jobs d
        SET pending_deps = d.pending_deps - n.released,
            last_error = CASE WHEN f.error IS NULL OR d.status <> 'pending'
                                   OR d.last_error ? 'deferred' THEN d.last_error
                              ELSE f.error END,
            run_at = CASE WHEN f.error IS NULL OR d.status <> 'pending' THEN d.run_at
                          ELSE least(d.run_at, now()) END
        FROM (SELECT r.id, count(*)::int AS released FROM unnest(released) AS r(id)
              GROUP BY r.id) n
        LEFT JOIN (
            SELECT DISTINCT ON (x.dependent_id) x.dependent_id,
                   jsonb_build_object(
                       'type', 'DependencyFailed', 'prerequisite', x.prerequisite_id,
                       'prerequisite_queue', p.queue, 'prerequisite_key', p.job_key,
                       'message', format('prerequisite job %s ended dead', x.prerequisite_id),
                       'deferred', true) AS error
            FROM unnest(pre, dep, pol, outcome) AS x(prerequisite_id, dependent_id, policy, outcome)
            JOIN {schema}.jobs p ON p.id = x.prerequisite_id
            WHERE x.policy = 'cascade_deferred' AND x.outcome = 'dead'
            ORDER BY x.dependent_id, x.prerequisite_id
        ) f ON f.dependent_id = n.id
        WHERE d.id = n.id;

        -- cascade: a pending dependent fails with its prerequisite (dead, or cancelled when the
        -- prerequisite was cancelled or removed); its own dependents are resolved next round.
        -- cascade_deferred cancels it so for a cancelled or removed prerequisite.
        -- The error names the prerequisite by id, queue and job key (a removed one's row is
        -- still there: its removal resolves before it deletes).
        WITH failed AS (
            UPDATE {schema}.jobs d
            SET status = CASE WHEN r.outcome = 'dead' THEN 'dead' ELSE 'cancelled' END,
                finished_at = now(),
                last_error = jsonb_build_object(
                    'type', 'DependencyFailed', 'prerequisite', r.prerequisite_id,
                    'prerequisite_queue', p.queue, 'prerequisite_key', p.job_key,
                    'message', format('prerequisite job %s ended %s', r.prerequisite_id, r.outcome))
            FROM (SELECT DISTINCT ON (x.dependent_id) x.*
                  FROM unnest(pre, dep, pol, outcome) AS x(prerequisite_id, dependent_id, policy, outcome)
                  WHERE (x.policy = 'cascade' AND x.outcome <> 'completed')
                     OR (x.policy = 'cascade_deferred' AND x.outcome IN ('cancelled', 'removed'))
                  ORDER BY x.dependent_id, x.prerequisite_id) r
            JOIN {schema}.jobs p ON p.id = r.prerequisite_id
            WHERE d.id = r.dependent_id AND d.status = 'pending'
            RETURNING d.id
        )
        SELECT coalesce(array_agg(id), '{}') INTO cascaded FROM failed;

        RETURN QUERY
            SELECT d.id FROM {schema}.jobs d
            WHERE d.id = ANY(released) AND d.status = 'pending' AND d.pending_deps = 0
              AND d.waits;  -- one that does not wait was claimable already

        frontier := cascaded;
        all_cascaded := all_cascaded || cascaded;
        removing := false;
    END LOOP;
    IF cardinality(all_cascaded) > 0 THEN
        RETURN QUERY SELECT * FROM {schema}.drop_dead_prerequisites(all_cascaded);
    END IF;
END
$fn$;

-- drop_dead_prerequisites: delete the dead jobs among p_ids whose retention for dead is
-- {"count": 0} (BullMQ's removeOnFail: true), their dependents resolved first. A dependent
-- that a failure blocks is released, as by the job's removal (BullMQ removes the failed child
-- from its parent's dependencies); a job whose failure a waiting dependent still reads
-- (an ignore or continue edge, which records it) is kept while that dependent waits, as for
-- a completed job's output. A pending dependent it failed under cascade_deferred does not keep
-- it: the failure is copied onto that dependent (resolve_dependents). Housekeeping: no
-- 'removed' events. Returns the dependents that became claimable.
CREATE OR REPLACE FUNCTION {schema}.drop_dead_prerequisites(p_ids bigint[])
RETURNS SETOF bigint LANGUAGE plpgsql AS $fn$
DECLARE
    doomed bigint[];
BEGIN
    SELECT coalesce(array_agg(j.id ORDER BY j.id), '{}') INTO doomed
    FROM {schema}.jobs j
    WHERE j.id = ANY(p_ids) AND j.status = 'dead'
      AND (j.retention -> 'dead' ->> 'count')::int = 0
      AND NOT EXISTS (SELECT FROM {schema}.job_edges e JOIN {schema}.jobs d ON d.id = e.dependent_id
                      WHERE e.prerequisite_id = j.id AND d.status IN ('pending', 'running')
                        AND e.state <> 'blocked'
                        AND NOT (e.policy = 'cascade_deferred' AND e.state = 'failed'
                                 AND d.status = 'pending'));
    IF cardinality(doomed) = 0 THEN
        RETURN;
    END IF;
    RETURN QUERY SELECT * FROM {schema}.resolve_dependents(doomed, true);
    PERFORM {schema}.quiet_next_removal();  -- no 'removed' events (job_events.sql)
    DELETE FROM {schema}.jobs j WHERE j.id = ANY(doomed);
END
$fn$;

-- wake_dependents: resolve_dependents, then notify p_channel (at commit) with the queue of each
-- dependent that became claimable. Returns how many did.
CREATE OR REPLACE FUNCTION {schema}.wake_dependents(p_ids bigint[], p_removed boolean, p_channel text)
RETURNS int LANGUAGE plpgsql AS $fn$
DECLARE
    woken  bigint[];
    queues text[];
BEGIN
    SELECT coalesce(array_agg(d.id), '{}'), coalesce(array_agg(DISTINCT d.queue), '{}')
    INTO woken, queues
    FROM {schema}.jobs d WHERE d.id IN (SELECT {schema}.resolve_dependents(p_ids, p_removed));
    PERFORM pg_notify(p_channel, q) FROM unnest(queues) AS q;
    RETURN cardinality(woken);
END
$fn$;
