-- 0003: the window that workers with a rate limit of their own share (BullMQ's limiter key).
-- A worker's limit (max starts per period) is a parameter of its claims (claim_jobs), never a
-- setting of the queue: this table holds only the queue's current window, shared by every
-- worker that claims with a limit, and read by no other claim. A row is written by the first
-- such claim of a queue and reused from then on; a window whose end has passed is as good as
-- none (the next limited claim opens a new one, of its own period), so nothing here outlives
-- the workers for longer than their last window.
--   window_end:   when the current window ends (set by the claim that opened it, to its
--                 start plus that claim's period, as BullMQ's key expires after the duration
--                 of the worker whose job first counted in it)
--   window_count: the jobs limited claims started in it; a claim whose limit is max starts at
--                 most max - window_count more before window_end (each worker's own max
--                 against the shared count, as each BullMQ worker compares its max with the
--                 key's count)
CREATE TABLE {schema}.worker_windows (
    queue        text        CONSTRAINT worker_windows_pkey PRIMARY KEY,
    window_end   timestamptz NOT NULL,
    window_count integer     NOT NULL
                 CONSTRAINT worker_windows_window_count_check CHECK (window_count >= 0)
);
