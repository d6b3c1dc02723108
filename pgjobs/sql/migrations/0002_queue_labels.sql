-- 0002: a queue's name as its application gives it, and the words it is shown in.
--   label:   the name to show (BullMQ's queue name, without the '<prefix>:' the facade puts
--            before it in the engine's queue name); NULL shows the engine's name.
--   dialect: 'bullmq' for a queue the BullMQ facade (or the migration from BullMQ) writes: the
--            dashboard then speaks BullMQ's states and names for it; NULL for a native queue.
ALTER TABLE {schema}.queue_settings
    ADD COLUMN label   text,
    ADD COLUMN dialect text CONSTRAINT queue_settings_dialect_check CHECK (dialect = 'bullmq');

-- The finished jobs of each queue, counted as they finish rather than counted row by row when
-- read: one row per (queue, status) change, +n or -n, appended by the statements that change
-- finished rows (the triggers of schema/finished_counts.sql, import_jobs), never updated in
-- place, so finishing workers never wait on one another for a counter row; folded into one
-- row per (queue, status) by fold_finished_counts. A count is the sum of a queue's rows: exact
-- in every snapshot.
CREATE TABLE {schema}.finished_counts (
    queue  text   NOT NULL,
    status text   NOT NULL
           CONSTRAINT finished_counts_status_check CHECK (status IN ('completed', 'dead', 'cancelled')),
    n      bigint NOT NULL
);
-- The counts of the jobs already finished, taken while no job can change (SHARE ROW EXCLUSIVE
-- lets readers on and holds writers back until this migration's transaction, which also
-- creates the triggers, commits).
LOCK TABLE {schema}.jobs IN SHARE ROW EXCLUSIVE MODE;
INSERT INTO {schema}.finished_counts (queue, status, n)
SELECT queue, status, count(*) FROM {schema}.jobs WHERE finished_at IS NOT NULL GROUP BY 1, 2;
