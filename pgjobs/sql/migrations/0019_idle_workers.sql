-- 0019: hand-off to idle workers. A worker about to wait with free slots registers them here;
-- an enqueue of one job that could start at once writes it already leased to such a worker
-- and notifies that worker alone, with the row (enqueue_one): the job starts without a claim
-- round trip. Each hand-off takes one registered slot and records the claim's lock token in
-- `handed`, so the worker's next claim collects a hand-off whose notification it missed
-- (sql/schema/hand_offs.sql). Unlogged: a registration is only worth its worker's
-- life, and a server crash empties the table, as it ends every worker's session.
CREATE UNLOGGED TABLE {schema}.idle_workers (
    worker     uuid        PRIMARY KEY,
    queues     text[]      NOT NULL,
    kinds      text[]      NOT NULL,
    free       integer     NOT NULL CHECK (free >= 0),   -- slots not yet handed a job
    lease      float8      NOT NULL,                     -- seconds, as the worker's claims
    channel    text        NOT NULL,                     -- the worker's own notification channel
    expires_at timestamptz NOT NULL,                     -- renewed at every idle look
    handed     uuid[]      NOT NULL DEFAULT '{}'         -- lock tokens of the jobs handed
);
