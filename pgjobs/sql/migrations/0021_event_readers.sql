-- 0021: event readers that wait to be notified. A transaction that has sent a NOTIFY holds a
-- database-wide lock until it ends, so a job's 'added' event notified at every enqueue made
-- concurrent enqueues commit one at a time (sql/schema/wake.sql). An event stream now
-- registers here while it is open (JobQueue.events, renewed before it expires), and a write of
-- events in a transaction of its own notifies a queue's readers only while one is registered,
-- as a write of jobs notifies workers only while one waits (idle_workers, 0019). Unlogged: a
-- registration is only worth its reader's life, and a server crash ends every reader's session.
CREATE UNLOGGED TABLE {schema}.event_readers (
    reader     uuid        PRIMARY KEY,
    queues     text[]      NOT NULL,
    expires_at timestamptz NOT NULL                     -- renewed while the stream is open
);
