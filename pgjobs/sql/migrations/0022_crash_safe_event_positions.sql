-- 0022: event stream positions that survive a server crash. Crash recovery hands out again the
-- transaction ids that never reached the disk (an unlogged or asynchronous commit, a claim's),
-- so a stream's position, a transaction id, may lie ahead of transactions committed after the
-- crash: they would be skipped (sql/schema/event_positions.sql).
--
-- incarnation: one row, a token drawn afresh after every crash (unlogged: recovery empties it),
-- which tells a reader that its positions since the last one on disk may name lost ids.
CREATE UNLOGGED TABLE {schema}.incarnation (
    one   boolean PRIMARY KEY DEFAULT true CHECK (one),
    token uuid    NOT NULL
);
-- event_stream_starts: one row, rewritten durably by every stream that starts after its
-- snapshot, so that its start names no id a crash can hand out again.
CREATE TABLE {schema}.event_stream_starts (
    one boolean     PRIMARY KEY DEFAULT true CHECK (one),
    at  timestamptz NOT NULL
);
