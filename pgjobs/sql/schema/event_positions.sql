-- Event stream positions that survive a server crash (tables incarnation, event_stream_starts).
--
-- A stream's position in the event log is a transaction id (events.sql). Recovery from a crash
-- restarts the id counter after the newest id it finds in the WAL on disk, so the ids of
-- transactions whose commit never reached the disk are handed out again: an unlogged-only
-- transaction's, one committed with synchronous_commit off (every claim, and every write of
-- Durability.ASYNC), and those a stream's start snapshot names (measured on a private cluster:
-- the counter went from 751 back to 731 across an immediate restart). A stream positioned
-- on such an id would skip the events of the transactions that get the ids again. So:
--
-- * a stream's start is followed by a durable write (mark_event_stream_start), whose id comes
--   after the snapshot's and reaches the disk: every id after a crash is newer than the start;
-- * a stream counts a position as safe once the WAL is flushed past the insert position its
--   read saw (every commit it read lies before that), and on a new incarnation (a crash came
--   in between) goes back to the newest safe position, reading again what came after it:
--   events delivered since then may come twice, none is skipped.

-- current_incarnation: this server run's token, drawn by the first caller after a crash.
CREATE OR REPLACE FUNCTION {schema}.current_incarnation() RETURNS uuid
LANGUAGE plpgsql AS $fn$
DECLARE
    found_token uuid;
BEGIN
    SELECT token INTO found_token FROM {schema}.incarnation;
    IF found_token IS NULL THEN
        INSERT INTO {schema}.incarnation (token) VALUES (gen_random_uuid())
        ON CONFLICT (one) DO NOTHING;
        SELECT token INTO found_token FROM {schema}.incarnation;  -- ours or a racer's
    END IF;
    RETURN found_token;
END
$fn$;
