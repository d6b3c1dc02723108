-- 0012: a stall budget apart from attempts (BullMQ's maxStalledCount), a queue setting. A
-- running job whose lease ends has stalled. In a queue without a budget (max_stalls NULL) the
-- stall uses the attempt, as before. With a budget, the attempt is given back and the stall
-- counted on the job; it fails once it has stalled more than max_stalls times.
ALTER TABLE {schema}.jobs ADD COLUMN stalls integer NOT NULL DEFAULT 0 CHECK (stalls >= 0);
ALTER TABLE {schema}.queue_settings ADD COLUMN max_stalls integer CHECK (max_stalls >= 0);
