-- 0006: the groups of a queue (a job's group_key), which its claims serve in turn.
--
-- A row per (queue, group_key) that has had a job, written by the job's insert (trigger
-- note_job_group, groups.sql) or by a setting of the group made before its first job (a pause,
-- a concurrency cap, a rate limit). Rows stay when their group empties: the rotation walks
-- the pending jobs' index (jobs_group_claim_idx), so a group with no job costs it nothing.
--   paused_at:     set while the group is paused (its jobs wait; running ones finish)
--   concurrency:   the group's own cap on running jobs, before the queue's group cap
--   rate_limit, rate_period: the group's own limit (starts per period, seconds), before a
--                  claim's group limit
--   window_start, window_count: the group's current fixed window, with the starts counted in
--                  it (kept while a limit applies to the group)
--   window_limit, window_period: the limit that applied when a claim last served the group,
--                  and its period: the window is full while window_count reaches the limit
--   seen_cap:      the cap that applied when a claim last served the group
--   limited_until: the group starts nothing before this (a manual rate limit)
CREATE TABLE {schema}.job_groups (
    queue         text        NOT NULL,
    group_key     text        NOT NULL,
    paused_at     timestamptz,
    concurrency   integer     CONSTRAINT job_groups_concurrency_check CHECK (concurrency > 0),
    rate_limit    integer     CONSTRAINT job_groups_rate_limit_check CHECK (rate_limit > 0),
    rate_period   double precision
                  CONSTRAINT job_groups_rate_period_check CHECK (rate_period > 0),
    window_start  timestamptz,
    window_count  integer     NOT NULL DEFAULT 0,
    window_limit  integer,
    window_period double precision,
    seen_cap      integer,
    limited_until timestamptz,
    CONSTRAINT job_groups_pkey PRIMARY KEY (queue, group_key),
    CONSTRAINT job_groups_check CHECK ((rate_limit IS NULL) = (rate_period IS NULL))
);

-- grouped: set with a queue's first group: its claims rotate from then on.
-- group_cursor: the group a claim of the queue served last: the next claim starts after it,
-- in the order of the group keys, and wraps around.
-- group_settings: set once a group of the queue has had a pause or a limit of its own: until
-- then its claims need not read the groups' rows.
ALTER TABLE {schema}.queue_settings ADD COLUMN grouped boolean NOT NULL DEFAULT false,
                                    ADD COLUMN group_cursor text,
                                    ADD COLUMN group_settings boolean NOT NULL DEFAULT false;

-- A group's next job: its ready jobs in claim order (jobs_claim_idx's order, within a group).
CREATE INDEX jobs_group_claim_idx ON {schema}.jobs (queue, group_key, priority DESC, run_at, id)
    WHERE status = 'pending' AND (pending_deps = 0 OR NOT waits) AND group_key IS NOT NULL;

-- The groups of the jobs already there.
INSERT INTO {schema}.job_groups (queue, group_key)
SELECT DISTINCT queue, group_key FROM {schema}.jobs WHERE group_key IS NOT NULL
ON CONFLICT DO NOTHING;
INSERT INTO {schema}.queue_settings (queue, grouped)
SELECT DISTINCT queue, true FROM {schema}.job_groups
ON CONFLICT (queue) DO UPDATE SET grouped = true;
