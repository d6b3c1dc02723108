-- 0004: the job event log. A job enqueued with events=True has every transition (added,
-- active, progress, completed, failed, retrying, deferred, waiting_children, stalled, released, requeued,
-- rescheduled, cancelled, removed) appended to job_events by a row trigger, in the same
-- transaction as the change, so the log and the table never disagree. Jobs without the flag
-- do not fire the trigger at all (its WHEN clause), so the hot path of a plain job is unchanged.
--
-- Readers follow the log in commit-safe order: (txid, id), reading only transactions older
-- than every one still running (txid < pg_snapshot_xmin), so an event can never appear behind
-- a reader's cursor after it has passed.

ALTER TABLE {schema}.jobs ADD COLUMN record_events boolean NOT NULL DEFAULT false;

CREATE TABLE {schema}.job_events (
    id      bigint      GENERATED ALWAYS AS IDENTITY,
    txid    xid8        NOT NULL DEFAULT pg_current_xact_id(),
    queue   text        NOT NULL,
    job_id  bigint,                     -- NULL for queue events (paused, resumed, published)
    job_key text,
    tenant  text,
    event   text        NOT NULL,
    prev    text,
    data    jsonb,
    at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (txid, id)
);
CREATE INDEX job_events_queue_idx ON {schema}.job_events (queue, txid, id);

CREATE FUNCTION {schema}.record_job_event() RETURNS trigger LANGUAGE plpgsql AS $fn$
DECLARE
    ev   text;
    prev text;
    data jsonb;
    j    record;
BEGIN
    IF TG_OP = 'DELETE' THEN
        j := OLD;
        ev := 'removed';
        prev := OLD.status;
    ELSIF TG_OP = 'INSERT' THEN
        j := NEW;
        ev := 'added';
        data := jsonb_build_object(
            'name', NEW.name,
            'state', CASE WHEN NEW.pending_deps > 0 THEN 'waiting_children'
                          WHEN NEW.run_at > now() THEN 'delayed' ELSE 'ready' END,
            'run_at', NEW.run_at, 'priority', NEW.priority);
    ELSE
        j := NEW;
        prev := OLD.status;
        IF NEW.status IS DISTINCT FROM OLD.status THEN
            IF NEW.status = 'running' THEN
                ev := 'active';
                data := jsonb_build_object('attempt', NEW.attempts);
            ELSIF NEW.status = 'completed' THEN
                ev := 'completed';
                data := jsonb_build_object('output', NEW.output, 'attempts', NEW.attempts);
            ELSIF NEW.status = 'dead' THEN
                ev := 'failed';
                data := jsonb_build_object('error', NEW.last_error, 'attempts', NEW.attempts,
                                           'max_attempts', NEW.max_attempts);
            ELSIF NEW.status = 'cancelled' THEN
                ev := 'cancelled';
            ELSIF OLD.status = 'running' THEN
                ev := CASE WHEN NEW.deferrals > OLD.deferrals THEN 'deferred'
                           WHEN NEW.pending_deps > 0 THEN 'waiting_children'
                           WHEN NEW.last_error ->> 'type' = 'LeaseExpired'
                                AND NEW.last_error IS DISTINCT FROM OLD.last_error THEN 'stalled'
                           ELSE 'retrying' END;
                data := jsonb_build_object('run_at', NEW.run_at, 'error', NEW.last_error,
                                           'attempts', NEW.attempts);
            ELSE
                ev := 'requeued';
                data := jsonb_build_object('run_at', NEW.run_at);
            END IF;
        ELSIF NEW.status = 'pending' AND NEW.pending_deps = 0 AND OLD.pending_deps > 0 THEN
            ev := 'released';
            data := jsonb_build_object('run_at', NEW.run_at);
        ELSIF NEW.progress IS DISTINCT FROM OLD.progress AND NEW.status = 'running' THEN
            ev := 'progress';
            data := jsonb_build_object('progress', NEW.progress);
        ELSIF NEW.status = 'pending' AND NEW.run_at IS DISTINCT FROM OLD.run_at THEN
            ev := 'rescheduled';
            data := jsonb_build_object('run_at', NEW.run_at);
        ELSE
            RETURN NULL;
        END IF;
    END IF;
    INSERT INTO {schema}.job_events (queue, job_id, job_key, tenant, event, prev, data)
    VALUES (j.queue, j.id, j.job_key, j.tenant, ev, prev, data);
    -- One notification per queue per transaction (identical payloads are folded at commit).
    PERFORM pg_notify(TG_TABLE_SCHEMA || '_events', j.queue);
    RETURN NULL;
END
$fn$;

CREATE TRIGGER jobs_events_insert AFTER INSERT ON {schema}.jobs
    FOR EACH ROW WHEN (NEW.record_events) EXECUTE FUNCTION {schema}.record_job_event();
CREATE TRIGGER jobs_events_update AFTER UPDATE ON {schema}.jobs
    FOR EACH ROW WHEN (NEW.record_events) EXECUTE FUNCTION {schema}.record_job_event();
CREATE TRIGGER jobs_events_delete AFTER DELETE ON {schema}.jobs
    FOR EACH ROW WHEN (OLD.record_events) EXECUTE FUNCTION {schema}.record_job_event();
