-- 0006: time-bound deduplication (BullMQ's throttle and debounce modes). A hold names the job
-- that took a dedup key and until when the key stays taken, whatever that job's status: a
-- duplicate arriving before expires_at is dropped (or extends the hold, or replaces a still
-- delayed holder). Keys without a ttl keep using the in-flight unique index of 0001.
CREATE TABLE {schema}.dedup_holds (
    queue      text        NOT NULL,
    tenant     text        NOT NULL DEFAULT '',
    key        text        NOT NULL,
    job_id     bigint,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (queue, tenant, key)
);
CREATE INDEX dedup_holds_expiry_idx ON {schema}.dedup_holds (expires_at);
