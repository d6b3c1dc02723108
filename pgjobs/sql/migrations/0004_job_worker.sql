-- 0004: the worker that started a job's latest attempt (its name, as it reports itself in
-- table workers), written by the claim that starts the attempt or the enqueue that hands the
-- job to an idle worker; NULL for a job never started by a worker (claimed by hand, or not yet
-- started). Adding a nullable column without a default rewrites nothing.
ALTER TABLE {schema}.jobs ADD COLUMN worker text;
