-- 0014: the workers that are running, as they report themselves: a row written when a worker
-- starts and refreshed with its heartbeats, deleted when it stops. A row whose last_seen is
-- older than its worker's heartbeat interval allows belongs to a worker that died.
CREATE TABLE {schema}.workers (
    id          uuid        PRIMARY KEY,
    name        text        NOT NULL,
    host        text        NOT NULL,
    pid         integer     NOT NULL,
    queues      text[]      NOT NULL,
    concurrency integer     NOT NULL,
    running     integer     NOT NULL DEFAULT 0,   -- jobs it held at its last heartbeat
    heartbeat   float8      NOT NULL,             -- seconds between its heartbeats
    started_at  timestamptz NOT NULL DEFAULT now(),
    last_seen   timestamptz NOT NULL DEFAULT now()
);
